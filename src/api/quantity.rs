//! Kubernetes resource quantities (`resource.Quantity`): `100m`, `0.5`, `.5`, `1Gi`, `1e3`, `5n`.
//!
//! A quantity is kept exactly as `±mantissa × 10^exp10 × 2^exp2`, so `value()` and
//! `milli_value()` can round the way Kubernetes does: away from zero ("up") when precision is
//! lost, saturating at the `i64` bounds.

use serde_json::Value;

/// Longest quantity string we accept; real quantities are a handful of characters.
const MAX_LEN: usize = 64;

/// A parsed quantity.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Quantity {
    negative: bool,
    /// Significant digits (leading zeros dropped; at most 38 digits).
    mantissa: u128,
    /// Decimal exponent applied to the mantissa (from the fraction, SI suffix or `eN`).
    exp10: i32,
    /// Binary exponent (from `Ki`..`Ei`: 10, 20, ..., 60).
    exp2: u32,
}

impl Quantity {
    /// True for a quantity below zero.
    pub fn is_negative(&self) -> bool {
        self.negative && self.mantissa != 0
    }

    /// The value rounded away from zero to an integer (Kubernetes `Quantity.Value()`).
    pub fn value(&self) -> i64 {
        self.scaled(0)
    }

    /// The value × 1000 rounded away from zero (Kubernetes `Quantity.MilliValue()`).
    pub fn milli_value(&self) -> i64 {
        self.scaled(3)
    }

    /// Exact comparison of two quantities.
    pub fn cmp_value(&self, other: &Quantity) -> std::cmp::Ordering {
        use std::cmp::Ordering;
        match (self.is_negative(), other.is_negative()) {
            (false, true) => return Ordering::Greater,
            (true, false) => return Ordering::Less,
            _ => {}
        }
        // Same sign: compare magnitudes at nano-scale precision first (covers every practical
        // quantity exactly), falling back to ordering of the scaled magnitudes.
        let a = self.abs_scaled_u128(12);
        let b = other.abs_scaled_u128(12);
        let ord = a.cmp(&b);
        if self.is_negative() {
            ord.reverse()
        } else {
            ord
        }
    }

    /// |value| × 10^t, rounded away from zero, saturating at u128::MAX.
    fn abs_scaled_u128(&self, t: i32) -> u128 {
        if self.mantissa == 0 {
            return 0;
        }
        let mut n = self.mantissa;
        for _ in 0..self.exp2 {
            n = match n.checked_mul(2) {
                Some(v) => v,
                None => return u128::MAX,
            };
        }
        let total = self.exp10.saturating_add(t);
        if total >= 0 {
            for _ in 0..total {
                n = match n.checked_mul(10) {
                    Some(v) => v,
                    None => return u128::MAX,
                };
            }
            n
        } else {
            let mut fraction = false;
            for _ in 0..total.unsigned_abs() {
                if n % 10 != 0 {
                    fraction = true;
                }
                n /= 10;
                if n == 0 {
                    // Anything left is a fraction.
                    fraction = true;
                    break;
                }
            }
            if fraction { n + 1 } else { n }
        }
    }

    fn scaled(&self, t: i32) -> i64 {
        let mag = self.abs_scaled_u128(t);
        if self.is_negative() {
            if mag > i64::MAX as u128 + 1 {
                i64::MIN
            } else {
                (mag as i128).wrapping_neg() as i64
            }
        } else if mag > i64::MAX as u128 {
            i64::MAX
        } else {
            mag as i64
        }
    }
}

/// Parse a quantity given as a JSON string or number.
pub fn parse_quantity(v: &Value) -> Result<Quantity, QuantityError> {
    match v {
        Value::String(s) => parse_quantity_str(s),
        Value::Number(n) => parse_quantity_str(&n.to_string()),
        other => Err(QuantityError::Type(type_name(other))),
    }
}

fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// Why a quantity does not parse; the messages are the apiserver's.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum QuantityError {
    #[error("quantities must be a string or a number, got {0}")]
    Type(&'static str),
    #[error("quantities must not be empty")]
    Empty,
    #[error("quantity is too long ({0} bytes)")]
    TooLong(usize),
    #[error(
        "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"
    )]
    Format,
    #[error("unable to parse quantity's suffix {0:?}")]
    Suffix(String),
    #[error("quantity exponent {0:?} is out of range")]
    Exponent(String),
}

/// Parse the string form of a quantity.
pub fn parse_quantity_str(s: &str) -> Result<Quantity, QuantityError> {
    if s.is_empty() {
        return Err(QuantityError::Empty);
    }
    if s.len() > MAX_LEN {
        return Err(QuantityError::TooLong(s.len()));
    }
    let bytes = s.as_bytes();
    let mut i = 0;
    let mut negative = false;
    if let Some(&c) = bytes.first() {
        if c == b'+' || c == b'-' {
            negative = c == b'-';
            i = 1;
        }
    }
    // Number: digits [. digits]
    let mut mantissa: u128 = 0;
    let mut exp10: i32 = 0;
    let mut any_digit = false;
    let mut seen_dot = false;
    let mut significant = 0usize;
    while i < bytes.len() {
        let c = bytes[i];
        if c.is_ascii_digit() {
            any_digit = true;
            let d = u128::from(c - b'0');
            if mantissa == 0 && d == 0 {
                // Leading zero: insignificant, but after the dot it still shifts the scale.
                if seen_dot {
                    exp10 -= 1;
                }
            } else if significant < 38 {
                mantissa = mantissa * 10 + d;
                significant += 1;
                if seen_dot {
                    exp10 -= 1;
                }
            } else {
                // Beyond 38 significant digits: keep the scale, round the tail up.
                if !seen_dot {
                    exp10 += 1;
                }
                if d != 0 && mantissa % 10 == 0 {
                    // Mark the lost precision so rounding stays "up"; tiny inexactness at
                    // this length is irrelevant for resource amounts.
                    mantissa += 1;
                }
            }
            i += 1;
        } else if c == b'.' {
            if seen_dot {
                return Err(QuantityError::Format);
            }
            seen_dot = true;
            i += 1;
        } else {
            break;
        }
    }
    if !any_digit {
        return Err(QuantityError::Format);
    }
    let suffix = &s[i..];
    let mut exp2 = 0u32;
    match suffix {
        "" => {}
        "n" => exp10 -= 9,
        "u" => exp10 -= 6,
        "m" => exp10 -= 3,
        "k" => exp10 += 3,
        "M" => exp10 += 6,
        "G" => exp10 += 9,
        "T" => exp10 += 12,
        "P" => exp10 += 15,
        "E" => exp10 += 18,
        "Ki" => exp2 = 10,
        "Mi" => exp2 = 20,
        "Gi" => exp2 = 30,
        "Ti" => exp2 = 40,
        "Pi" => exp2 = 50,
        "Ei" => exp2 = 60,
        _ => {
            let rest = suffix
                .strip_prefix('e')
                .or_else(|| suffix.strip_prefix('E'))
                .ok_or_else(|| QuantityError::Suffix(suffix.into()))?;
            let (sign, digits) = match rest.as_bytes().first() {
                Some(b'-') => (-1i32, &rest[1..]),
                Some(b'+') => (1, &rest[1..]),
                _ => (1, rest),
            };
            if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
                return Err(QuantityError::Suffix(suffix.into()));
            }
            let e: i32 = digits
                .parse()
                .map_err(|_| QuantityError::Exponent(suffix.into()))?;
            if e > 1000 {
                return Err(QuantityError::Exponent(suffix.into()));
            }
            exp10 += sign * e;
        }
    }
    Ok(Quantity {
        negative,
        mantissa,
        exp10,
        exp2,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn q(s: &str) -> Quantity {
        match parse_quantity_str(s) {
            Ok(q) => q,
            Err(e) => panic!("{s}: {e}"),
        }
    }

    #[test]
    fn kubernetes_examples_value_and_milli() {
        // (input, Value(), MilliValue()) — examples from resource.Quantity's docs and tests.
        let cases: &[(&str, i64, i64)] = &[
            ("0", 0, 0),
            ("100m", 1, 100),
            ("0.1", 1, 100),
            (".5", 1, 500),
            ("0.5", 1, 500),
            ("1", 1, 1000),
            ("1.5", 2, 1500),
            ("5n", 1, 1),
            ("5u", 1, 1),
            ("1k", 1000, 1_000_000),
            ("1M", 1_000_000, 1_000_000_000),
            ("1G", 1_000_000_000, 1_000_000_000_000),
            ("1Ki", 1024, 1_024_000),
            ("1Mi", 1_048_576, 1_048_576_000),
            ("1.5Gi", 1_610_612_736, 1_610_612_736_000),
            ("128974848", 128_974_848, 128_974_848_000),
            ("129e6", 129_000_000, 129_000_000_000),
            ("129M", 129_000_000, 129_000_000_000),
            ("123Mi", 128_974_848, 128_974_848_000),
            ("1e3", 1000, 1_000_000),
            ("1E3", 1000, 1_000_000),
            ("1e-3", 1, 1),
            ("1E", 1_000_000_000_000_000_000, i64::MAX),
            ("1Ei", 1 << 60, i64::MAX),
            ("-5n", -1, -1),
            ("-100m", -1, -100),
            ("+2", 2, 2000),
            ("5.", 5, 5000),
            ("0.000", 0, 0),
            ("250m", 1, 250),
        ];
        for (s, v, m) in cases {
            let got = q(s);
            assert_eq!(got.value(), *v, "value of {s}");
            assert_eq!(got.milli_value(), *m, "milli of {s}");
        }
    }

    #[test]
    fn json_numbers() {
        assert_eq!(parse_quantity(&json!(2)).map(|q| q.milli_value()), Ok(2000));
        assert_eq!(
            parse_quantity(&json!(0.5)).map(|q| q.milli_value()),
            Ok(500)
        );
        assert_eq!(parse_quantity(&json!(1024)).map(|q| q.value()), Ok(1024));
        assert_eq!(
            parse_quantity(&json!("64Mi")).map(|q| q.value()),
            Ok(64 * 1024 * 1024)
        );
        assert!(parse_quantity(&json!(null)).is_err());
        assert!(parse_quantity(&json!([1])).is_err());
        assert!(parse_quantity(&json!(true)).is_err());
    }

    #[test]
    fn garbage_is_rejected() {
        for s in [
            "",
            ".",
            "-",
            "+",
            "abc",
            "1.2.3",
            "1Kb",
            "1kk",
            "1e",
            "1e+",
            "1ee3",
            "Mi",
            "1 Mi",
            " 1",
            "1i",
            "1KI",
            "1e99999999999",
            "--1",
            "0x10",
            "1,5",
            "∞",
        ] {
            assert!(parse_quantity_str(s).is_err(), "{s:?} should be rejected");
        }
        let long = "1".repeat(100);
        assert!(parse_quantity_str(&long).is_err());
    }

    #[test]
    fn huge_values_saturate_and_never_panic() {
        assert_eq!(
            q("9999999999999999999999999999999999999999999").value(),
            i64::MAX
        );
        assert_eq!(q("1e1000").milli_value(), i64::MAX);
        assert_eq!(q("-1e1000").value(), i64::MIN);
        assert_eq!(q("1e-1000").value(), 1);
        assert_eq!(q("0e1000").value(), 0);
        assert_eq!(
            q("0.00000000000000000000000000000000000000000001").milli_value(),
            1
        );
    }

    #[test]
    fn comparison() {
        use std::cmp::Ordering::*;
        assert_eq!(q("500m").cmp_value(&q("0.5")), Equal);
        assert_eq!(q("1Gi").cmp_value(&q("1G")), Greater);
        assert_eq!(q("100Mi").cmp_value(&q("200Mi")), Less);
        assert_eq!(q("-1").cmp_value(&q("0")), Less);
        assert_eq!(q("1k").cmp_value(&q("1e3")), Equal);
    }
}
