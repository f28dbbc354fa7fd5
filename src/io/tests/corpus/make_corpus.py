"""Regenerates the safetensors corpus in this directory: small malformed files
(each must be rejected with qpu::Error naming the file and, where there is one,
the tensor) and small valid ones (must load). expected.json records, per file,
"valid" and the fragments the error message must contain. The same files seed
the libFuzzer target (src/io/fuzz). Plain python3, no dependencies.

usage: python3 make_corpus.py   (writes next to itself)
"""
import json
import os
import struct

HERE = os.path.dirname(os.path.abspath(__file__))
expected = {}


def raw(name, data, valid=False, error=()):
    with open(os.path.join(HERE, name), "wb") as f:
        f.write(data)
    expected[name] = {"valid": valid, "error": list(error)}


def st(name, header, data=b"", valid=False, error=(), pad=True):
    """A file from a header (dict or raw str) and a data section."""
    text = header if isinstance(header, (str, bytes)) else json.dumps(header)
    text = text.encode() if isinstance(text, str) else text
    if pad:
        text += b" " * ((8 - len(text) % 8) % 8)
    raw(name, struct.pack("<Q", len(text)) + text + data, valid, error)


f32 = lambda *v: struct.pack("<%df" % len(v), *v)
T = lambda dtype, shape, begin, end: {"dtype": dtype, "shape": shape, "data_offsets": [begin, end]}

# ---- valid ----
st("good_f32.safetensors", {"w": T("F32", [2, 2], 0, 16)}, f32(1, -0.0, float("inf"), 1e-45), valid=True)
st("good_mixed.safetensors",
   {"__metadata__": {"format": "pt", "note": "mixed"}, "a": T("F32", [], 0, 4), "b": T("BF16", [3], 4, 10),
    "c": T("F16", [1, 3], 10, 16), "empty": T("F32", [0, 5], 16, 16)},
   f32(2.5) + struct.pack("<3H", 0x3f80, 0x8000, 0x7fc0) + struct.pack("<3H", 0x0001, 0x7c00, 0xfc00), valid=True)
st("good_other_dtypes.safetensors",
   {"i": T("I32", [2], 0, 8), "u": T("U8", [3], 8, 11), "b": T("BOOL", [1], 11, 12), "d": T("F64", [1], 12, 20),
    "l": T("I64", [1], 20, 28), "e": T("F8_E4M3", [2], 28, 30)}, bytes(range(30)), valid=True)
st("good_no_tensors.safetensors", {}, valid=True)
st("good_unpadded.safetensors", '{"x":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}', f32(3.0), valid=True,
   pad=False)

# ---- framing ----
raw("bad_empty.safetensors", b"", error=["too short"])
raw("bad_short.safetensors", b"\x10\x00\x00", error=["too short"])
raw("bad_header_len_past_end.safetensors", struct.pack("<Q", 1000) + b"{}", error=["larger than"])
raw("bad_header_len_absurd.safetensors", struct.pack("<Q", 1 << 40) + b"{}", error=["exceeds"])
raw("bad_header_len_max.safetensors", struct.pack("<Q", (1 << 64) - 1) + b"{}", error=["exceeds"])
raw("bad_header_len_zero.safetensors", struct.pack("<Q", 0), error=["start with"])
st("bad_not_json.safetensors", "{abc", error=["not valid JSON"])
st("bad_array_header.safetensors", "[1, 2]", error=["start with"])
st("bad_trailing_garbage.safetensors", '{} x', error=["not valid JSON"])
st("bad_nul_padding.safetensors", b"{}\0\0\0\0\0\0", error=["NUL byte"], pad=False)
st("bad_invalid_utf8.safetensors", b'{"\xff\xfe": {"dtype": "F32", "shape": [], "data_offsets": [0, 4]}}',
   f32(1), error=["not valid JSON"])
st("bad_deep_nesting.safetensors", '{"a": ' + "[" * 500 + "]" * 500 + "}", error=["nested deeper"])

# ---- metadata ----
st("bad_metadata_not_object.safetensors", {"__metadata__": [1]}, error=["__metadata__"])
st("bad_metadata_value.safetensors", {"__metadata__": {"k": 1}}, error=["__metadata__", "'k'"])

# ---- tensor entries ----
st("bad_entry_not_object.safetensors", {"w": 5}, error=["'w'", "not an object"])
st("bad_unknown_field.safetensors", {"w": {**T("F32", [1], 0, 4), "extra": 1}}, f32(1), error=["'w'", "extra"])
st("bad_unknown_dtype.safetensors", {"w": T("F12", [1], 0, 4)}, f32(1), error=["'w'", "F12"])
st("bad_dtype_not_string.safetensors", {"w": T(4, [1], 0, 4)}, f32(1), error=["'w'", "dtype"])
st("bad_missing_dtype.safetensors", {"w": {"shape": [1], "data_offsets": [0, 4]}}, f32(1), error=["'w'", "dtype"])
st("bad_missing_shape.safetensors", {"w": {"dtype": "F32", "data_offsets": [0, 4]}}, f32(1), error=["'w'", "shape"])
st("bad_missing_offsets.safetensors", {"w": {"dtype": "F32", "shape": [1]}}, f32(1), error=["'w'", "data_offsets"])
st("bad_shape_negative.safetensors", {"w": T("F32", [-1], 0, 4)}, f32(1), error=["'w'", "shape"])
st("bad_shape_float.safetensors", {"w": T("F32", [1.5], 0, 4)}, f32(1), error=["'w'", "shape"])
st("bad_shape_not_array.safetensors", {"w": T("F32", 4, 0, 16)}, f32(1, 2, 3, 4), error=["'w'", "shape"])
st("bad_shape_overflow.safetensors", {"w": T("F32", [1 << 32, 1 << 32, 1 << 32], 0, 4)}, f32(1),
   error=["'w'", "too many"])
st("bad_shape_bytes_overflow.safetensors", {"w": T("F64", [1 << 62], 0, 4)}, f32(1), error=["'w'", "too many"])
st("bad_shape_huge.safetensors", {"w": T("F32", [1 << 63], 0, 4)}, f32(1), error=["'w'", "shape"])
st("bad_offsets_reversed.safetensors", {"w": T("F32", [1], 4, 0)}, f32(1), error=["'w'", "end before begin"])
st("bad_offsets_one_value.safetensors", {"w": {"dtype": "F32", "shape": [1], "data_offsets": [0]}}, f32(1),
   error=["'w'", "data_offsets"])
st("bad_offsets_negative.safetensors", {"w": T("F32", [1], -4, 0)}, f32(1), error=["'w'", "data_offsets"])
st("bad_offsets_float.safetensors", {"w": T("F32", [1], 0.0, 4)}, f32(1), error=["'w'", "data_offsets"])
st("bad_size_mismatch.safetensors", {"w": T("F32", [2], 0, 4)}, f32(1), error=["'w'", "needs 8"])
st("bad_past_end.safetensors", {"w": T("F32", [2], 0, 8)}, f32(1), error=["'w'", "past the data section"])
st("bad_overlap.safetensors", {"a": T("F32", [2], 0, 8), "b": T("F32", [1], 4, 8)}, f32(1, 2),
   error=["'a'", "'b'", "overlaps"])
st("bad_gap.safetensors", {"a": T("F32", [1], 0, 4), "b": T("F32", [1], 8, 12)}, f32(1, 2, 3),
   error=["'b'", "gap"])
st("bad_leading_gap.safetensors", {"a": T("F32", [1], 4, 8)}, f32(1, 2), error=["'a'", "gap"])
st("bad_trailing_bytes.safetensors", {"a": T("F32", [1], 0, 4)}, f32(1, 2), error=["after the last tensor"])
st("bad_duplicate_name.safetensors",
   '{"w": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}, '
   '"w": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}}', f32(1, 2), error=["duplicate tensor name 'w'"])
st("bad_duplicate_field.safetensors", '{"w": {"dtype": "F32", "dtype": "F16", "shape": [1], "data_offsets": [0, 4]}}',
   f32(1), error=["'w'", "duplicate field 'dtype'"])

with open(os.path.join(HERE, "expected.json"), "w") as f:
    json.dump(expected, f, indent=1, sort_keys=True)
    f.write("\n")
