#include "common/error.h"
// Anchors the library; Error is header-only today.
