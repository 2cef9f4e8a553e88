// Placeholder: filled by the reliability work of the safety issue.
#include "catch_compat.hpp"
