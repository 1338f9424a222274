//! Human-friendly sizes and durations for policies and flags.
//!
//! Limits are security settings, so parsing is strict: an unknown suffix, a zero, or an overflow
//! is an error rather than a silently different limit.

use std::fmt;
use std::time::Duration;

use serde::de::{self, Deserializer, Visitor};
use serde::{Deserialize, Serialize, Serializer};

/// A byte count written as `512MiB`, `256m`, `1g`, `64KiB`, `100MB` or a plain integer.
///
/// Single-letter suffixes follow Docker's meaning (binary, `256m` is 256 MiB), `KiB`/`MiB`/`GiB`
/// are binary, `KB`/`MB`/`GB` are decimal. Stored as bytes so comparisons are exact.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Size(pub u64);

/// Why a size or duration string was refused; shown to the person with the offending text.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UnitError {
    /// The text is not a number followed by a known unit.
    #[error(
        "invalid size {0:?}: expected a number with an optional unit such as 64k, 256m, 1g, 512MiB"
    )]
    BadSize(String),
    /// The text is not a duration such as `30s` or `5m`.
    #[error("invalid duration {0:?}: expected a number with a unit such as 30s, 5m, 1h")]
    BadDuration(String),
    /// Zero is never a meaningful limit and would disable the limit in Docker.
    #[error("{0:?} must be greater than zero")]
    Zero(String),
}

impl Size {
    /// Parses the forms described on [`Size`].
    pub fn parse(text: &str) -> Result<Size, UnitError> {
        let s = text.trim();
        let split = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
        let (digits, unit) = s.split_at(split);
        if digits.is_empty() {
            return Err(UnitError::BadSize(text.to_string()));
        }
        let n: u64 = digits
            .parse()
            .map_err(|_| UnitError::BadSize(text.to_string()))?;
        let mult: u64 = match unit.trim() {
            "" | "b" | "B" => 1,
            "k" | "K" | "KiB" | "kib" => 1 << 10,
            "m" | "M" | "MiB" | "mib" => 1 << 20,
            "g" | "G" | "GiB" | "gib" => 1 << 30,
            "t" | "T" | "TiB" | "tib" => 1 << 40,
            "KB" | "kB" | "kb" => 1_000,
            "MB" | "mb" => 1_000_000,
            "GB" | "gb" => 1_000_000_000,
            "TB" | "tb" => 1_000_000_000_000,
            _ => return Err(UnitError::BadSize(text.to_string())),
        };
        let bytes = n
            .checked_mul(mult)
            .ok_or_else(|| UnitError::BadSize(text.to_string()))?;
        if bytes == 0 {
            return Err(UnitError::Zero(text.to_string()));
        }
        Ok(Size(bytes))
    }

    /// The value in bytes.
    pub fn bytes(self) -> u64 {
        self.0
    }
}

impl fmt::Display for Size {
    /// Prints the largest binary unit that divides the value exactly, so output round-trips.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const UNITS: [(u64, &str); 4] = [
            (1 << 40, "TiB"),
            (1 << 30, "GiB"),
            (1 << 20, "MiB"),
            (1 << 10, "KiB"),
        ];
        for (mult, name) in UNITS {
            if self.0 >= mult && self.0 % mult == 0 {
                return write!(f, "{}{}", self.0 / mult, name);
            }
        }
        write!(f, "{}B", self.0)
    }
}

impl std::str::FromStr for Size {
    type Err = UnitError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Size::parse(s)
    }
}

impl Serialize for Size {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&self.to_string())
    }
}

impl<'de> Deserialize<'de> for Size {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = Size;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a size such as 64k, 256m, 1g, 512MiB or a number of bytes")
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Size, E> {
                if v == 0 {
                    return Err(E::custom(UnitError::Zero(v.to_string())));
                }
                Ok(Size(v))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Size, E> {
                u64::try_from(v)
                    .map_err(|_| E::custom(UnitError::BadSize(v.to_string())))
                    .and_then(|v| self.visit_u64(v))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Size, E> {
                Size::parse(v).map_err(E::custom)
            }
        }
        deserializer.deserialize_any(V)
    }
}

/// A wall-clock limit written as `30s`, `5m`, `1h30m` (humantime syntax).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Limit(pub Duration);

impl Limit {
    /// Parses humantime syntax and refuses zero, which would mean "no limit" to a careless reader.
    pub fn parse(text: &str) -> Result<Limit, UnitError> {
        let d = humantime::parse_duration(text.trim())
            .map_err(|_| UnitError::BadDuration(text.to_string()))?;
        if d.is_zero() {
            return Err(UnitError::Zero(text.to_string()));
        }
        Ok(Limit(d))
    }

    /// The underlying duration.
    pub fn duration(self) -> Duration {
        self.0
    }
}

impl fmt::Display for Limit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", humantime::format_duration(self.0))
    }
}

impl std::str::FromStr for Limit {
    type Err = UnitError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Limit::parse(s)
    }
}

impl Serialize for Limit {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&self.to_string())
    }
}

impl<'de> Deserialize<'de> for Limit {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let s = String::deserialize(deserializer)?;
        Limit::parse(&s).map_err(de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn docker_style_suffixes_are_binary() {
        assert_eq!(Size::parse("256m").unwrap().bytes(), 256 << 20);
        assert_eq!(Size::parse("1g").unwrap().bytes(), 1 << 30);
        assert_eq!(Size::parse("512MiB").unwrap().bytes(), 512 << 20);
        assert_eq!(Size::parse("64k").unwrap().bytes(), 64 << 10);
        assert_eq!(Size::parse("100MB").unwrap().bytes(), 100_000_000);
        assert_eq!(Size::parse("4096").unwrap().bytes(), 4096);
    }

    #[test]
    fn bad_sizes_are_refused() {
        for bad in [
            "",
            "m",
            "12q",
            "-1m",
            "1.5g",
            "0",
            "0m",
            "99999999999999999999g",
            "1 g b",
        ] {
            assert!(Size::parse(bad).is_err(), "{bad:?} should be refused");
        }
    }

    #[test]
    fn sizes_print_in_the_largest_exact_unit() {
        assert_eq!(Size(512 << 20).to_string(), "512MiB");
        assert_eq!(Size(1536).to_string(), "1536B");
        assert_eq!(Size(1 << 30).to_string(), "1GiB");
        let back: Size = Size(3 << 20).to_string().parse().unwrap();
        assert_eq!(back, Size(3 << 20));
    }

    #[test]
    fn durations_parse_and_refuse_zero() {
        assert_eq!(
            Limit::parse("30s").unwrap().duration(),
            Duration::from_secs(30)
        );
        assert_eq!(
            Limit::parse("5m").unwrap().duration(),
            Duration::from_secs(300)
        );
        assert!(Limit::parse("0s").is_err());
        assert!(Limit::parse("soon").is_err());
        assert!(Limit::parse("").is_err());
    }
}
