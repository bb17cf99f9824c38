// Python's numbers, as a template sees them: ints without a bound (GMP's integers beyond 64
// bits), floats compared with ints exactly, floor division and modulo with the divisor's sign,
// int() and float() of strings with Python's syntax, and round() correctly rounded on the
// float's exact binary value, half to even. What Python raises is a PyError with its message.
#pragma once

#include <compare>
#include <cstdint>
#include <optional>
#include <string>

#include "gemmax/data/jinja_value.h"

namespace gemmax::jinja {

// Python's binary arithmetic (+ - * / // % **) on numbers (bools count as ints).
Value arithmetic(const std::string& op, const Value& a, const Value& b);
Value negate(const Value& v);    // -v
Value absolute(const Value& v);  // abs(v)
// a <=> b exactly, as Python compares an int with a float; unordered when either is nan.
std::partial_ordering compare_numbers(const Value& a, const Value& b);

// float(v) of an int or bool; an int beyond float's range raises OverflowError's message.
double to_float(const Value& v);
// int(x) of a finite float (exact: int(1e30) has all 31 digits).
Value int_of_float(double x);
// int(s, base) and float(s) of a str, or nullopt where Python raises ValueError.
std::optional<Value> parse_int(const std::string& s, int base = 10);
std::optional<double> parse_float(const std::string& s);

// round(v, ndigits): an int stays an int, a float is rounded on its exact value, half to even.
Value round_number(const Value& v, int64_t ndigits);

// The integer of a Value that is Int or Bool; nullopt beyond 64 bits.
std::optional<int64_t> small_int(const Value& v);

}  // namespace gemmax::jinja
