// Placeholder: the systematic fault-injection sweep.
#include "catch_compat.hpp"
