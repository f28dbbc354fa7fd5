if(QPU_SANITIZE)
  # ASan + UBSan for the whole test build; UBSan errors abort so CTest sees them.
  add_compile_options(-fsanitize=address,undefined -fno-sanitize-recover=all
                      -fno-omit-frame-pointer)
  add_link_options(-fsanitize=address,undefined)
endif()
if(QPU_FUZZ)
  add_compile_options(-fsanitize=fuzzer-no-link)
endif()
