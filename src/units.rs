//! Physical quantities as newtypes: [`Bytes`], [`Time`] and [`Bandwidth`].
//!
//! Every quantity that enters collsim from a file or the command line carries its unit
//! ("400 Gb/s", "25 GB/s", "700 ns", "64 MiB"). Parsing is exact: the decimal text is read as an
//! integer mantissa and a power of ten, so "1.5 us" is exactly 1,500,000 ps and "20.6 GB/s" is
//! exactly 164.8e9 bit/s. Decimal prefixes (k, M, G, T) are powers of 1000, binary prefixes
//! (Ki, Mi, Gi, Ti) powers of 1024; a lowercase `b` means bits, an uppercase `B` bytes. A bare
//! number where a unit belongs is an error. This module knows nothing of GPUs or files.

use std::fmt;
use std::ops::{Add, AddAssign, Sub};

/// Why a quantity could not be parsed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UnitError {
    /// Nothing but a number was given where a unit is required.
    #[error("bare number {0:?}: a unit is required (e.g. {1})")]
    BareNumber(String, &'static str),
    /// The numeric part is not a plain non-negative decimal number.
    #[error("{0:?} is not a number followed by a unit (e.g. {1})")]
    NotANumber(String, &'static str),
    /// The unit is not one this quantity accepts.
    #[error("unknown unit {unit:?} in {text:?} (expected one of {expected})")]
    UnknownUnit {
        /// The unit as written.
        unit: String,
        /// The whole text.
        text: String,
        /// The units accepted.
        expected: &'static str,
    },
    /// The value is zero or negative where a positive value is required.
    #[error("{0:?} must be greater than zero")]
    NotPositive(String),
    /// The value does not fit, or is finer than the resolution.
    #[error("{0:?} is out of range or finer than the resolution ({1})")]
    OutOfRange(String, &'static str),
    /// A data rate below [`Bandwidth::MIN`].
    #[error("{0:?} is below 1 Mb/s, the slowest link collsim simulates")]
    TooSlow(String),
}

/// A decimal number as an integer mantissa and a power of ten: value = mantissa × 10^-scale.
#[derive(Debug, Clone, Copy)]
struct Decimal {
    mantissa: u128,
    scale: u32,
}

impl Decimal {
    /// Multiplies by `factor` and returns the value if it is a whole number that fits in u64.
    fn times(self, factor: u128) -> Option<u64> {
        let num = self.mantissa.checked_mul(factor)?;
        let div = 10u128.checked_pow(self.scale)?;
        if num % div != 0 {
            return None;
        }
        u64::try_from(num / div).ok()
    }

    fn is_zero(self) -> bool {
        self.mantissa == 0
    }
}

/// Splits "12.5 GB/s" into the number and the unit; rejects signs and exponents.
fn split_number(text: &str, example: &'static str) -> Result<(Decimal, String), UnitError> {
    let t = text.trim();
    if t.starts_with('-') {
        return Err(UnitError::NotPositive(text.to_string()));
    }
    let end = t.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(t.len());
    let (num, unit) = t.split_at(end);
    let unit = unit.trim().to_string();
    if num.is_empty() || num.matches('.').count() > 1 || num == "." {
        return Err(UnitError::NotANumber(text.to_string(), example));
    }
    let (int, frac) = num.split_once('.').unwrap_or((num, ""));
    let digits = format!("{int}{frac}");
    if digits.len() > 30 {
        return Err(UnitError::OutOfRange(text.to_string(), example));
    }
    let mantissa: u128 =
        digits.parse().map_err(|_| UnitError::NotANumber(text.to_string(), example))?;
    Ok((Decimal { mantissa, scale: frac.len() as u32 }, unit))
}

/// Writes `value / 10^scale` as a decimal with no trailing zeros.
fn fmt_scaled(value: u64, scale: u32) -> String {
    let div = 10u64.pow(scale);
    let (int, frac) = (value / div, value % div);
    if frac == 0 {
        return int.to_string();
    }
    let s = format!("{frac:0width$}", width = scale as usize);
    format!("{int}.{}", s.trim_end_matches('0'))
}

// ---------------------------------------------------------------------------------------------

/// A number of bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Bytes(u64);

const BYTE_UNITS: &[(&str, u128)] = &[
    ("B", 1),
    ("kB", 1_000),
    ("KB", 1_000),
    ("MB", 1_000_000),
    ("GB", 1_000_000_000),
    ("TB", 1_000_000_000_000),
    ("KiB", 1 << 10),
    ("MiB", 1 << 20),
    ("GiB", 1 << 30),
    ("TiB", 1 << 40),
];
const BYTE_EXPECTED: &str = "B, kB, MB, GB, TB, KiB, MiB, GiB, TiB";

impl Bytes {
    /// Zero bytes.
    pub const ZERO: Bytes = Bytes(0);

    /// `n` bytes.
    pub const fn new(n: u64) -> Self {
        Bytes(n)
    }

    /// `n` KiB (1024 bytes each).
    pub const fn from_kib(n: u64) -> Self {
        Bytes(n << 10)
    }

    /// `n` MiB.
    pub const fn from_mib(n: u64) -> Self {
        Bytes(n << 20)
    }

    /// `n` GiB.
    pub const fn from_gib(n: u64) -> Self {
        Bytes(n << 30)
    }

    /// The count of bytes.
    pub const fn get(self) -> u64 {
        self.0
    }

    /// The count as a float, for rate arithmetic.
    pub fn as_f64(self) -> f64 {
        self.0 as f64
    }

    /// Parses "64 MiB", "1 GB", "512 B". A bare number is an error.
    pub fn parse(text: &str) -> Result<Self, UnitError> {
        const EX: &str = "\"64 MiB\"";
        let (num, unit) = split_number(text, EX)?;
        if unit.is_empty() {
            return Err(UnitError::BareNumber(text.to_string(), EX));
        }
        Self::with_unit(text, num, &unit, EX)
    }

    /// Parses a size as nccl-tests' `-b`/`-e` flags take it: a bare number is bytes and the
    /// suffixes K, M, G, T are binary (2^10 …); the units of [`Bytes::parse`] are accepted too.
    pub fn parse_cli(text: &str) -> Result<Self, UnitError> {
        const EX: &str = "\"8\", \"64M\" or \"8 GiB\"";
        let (num, unit) = split_number(text, EX)?;
        let factor: Option<u128> = match unit.as_str() {
            "" => Some(1),
            "K" | "k" => Some(1 << 10),
            "M" | "m" => Some(1 << 20),
            "G" | "g" => Some(1 << 30),
            "T" | "t" => Some(1 << 40),
            _ => None,
        };
        match factor {
            Some(f) => num.times(f).map(Bytes).ok_or(UnitError::OutOfRange(text.to_string(), EX)),
            None => Self::with_unit(text, num, &unit, EX),
        }
    }

    fn with_unit(
        text: &str,
        num: Decimal,
        unit: &str,
        ex: &'static str,
    ) -> Result<Self, UnitError> {
        let factor =
            BYTE_UNITS.iter().find(|(u, _)| *u == unit).map(|(_, f)| *f).ok_or_else(|| {
                UnitError::UnknownUnit {
                    unit: unit.to_string(),
                    text: text.to_string(),
                    expected: BYTE_EXPECTED,
                }
            })?;
        num.times(factor).map(Bytes).ok_or(UnitError::OutOfRange(text.to_string(), ex))
    }
}

impl Bytes {
    /// For people reading a figure rather than a size to type back: in the largest binary unit
    /// it holds at least one of, with two decimals where that unit does not divide it
    /// ("386.02 MiB", "250 MiB", "212 B").
    pub fn approx(self) -> String {
        for (unit, shift) in [("TiB", 40), ("GiB", 30), ("MiB", 20), ("KiB", 10)] {
            if self.0 >= 1u64 << shift {
                if self.0.is_multiple_of(1u64 << shift) {
                    return format!("{} {unit}", self.0 >> shift);
                }
                return format!("{:.2} {unit}", self.0 as f64 / (1u64 << shift) as f64);
            }
        }
        format!("{} B", self.0)
    }
}

impl fmt::Display for Bytes {
    /// The largest binary unit that divides the value exactly ("8 GiB", "1536 B").
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (unit, shift) in [("TiB", 40), ("GiB", 30), ("MiB", 20), ("KiB", 10)] {
            if self.0 != 0 && self.0.is_multiple_of(1u64 << shift) {
                return write!(f, "{} {unit}", self.0 >> shift);
            }
        }
        write!(f, "{} B", self.0)
    }
}

impl Add for Bytes {
    type Output = Bytes;
    fn add(self, rhs: Bytes) -> Bytes {
        Bytes(self.0 + rhs.0)
    }
}

// ---------------------------------------------------------------------------------------------

/// A point in or span of a training step's time, in seconds. A step's timelines add compute
/// and collective times in floating point (a [`Time`] of picoseconds would round every
/// kernel); the engine's clock is [`Time`], and [`Secs::of`]/[`Secs::ceil`] cross between them.
#[derive(Debug, Clone, Copy, PartialEq, PartialOrd, Default, serde::Serialize)]
#[serde(transparent)]
pub struct Secs(f64);

impl Secs {
    /// Time zero.
    pub const ZERO: Secs = Secs(0.0);

    /// `s` seconds.
    pub const fn new(s: f64) -> Secs {
        Secs(s)
    }

    /// The engine's time `t`.
    pub fn of(t: Time) -> Secs {
        Secs(t.as_secs_f64())
    }

    /// Seconds.
    pub const fn get(self) -> f64 {
        self.0
    }

    /// Milliseconds, as reports give them.
    pub fn ms(self) -> f64 {
        self.0 * 1e3
    }

    /// The engine's time, rounded up to the next picosecond (a wait never ends early).
    pub fn ceil(self) -> Time {
        Time::from_secs_f64_ceil(self.0)
    }
}

impl Add for Secs {
    type Output = Secs;
    fn add(self, rhs: Secs) -> Secs {
        Secs(self.0 + rhs.0)
    }
}

impl AddAssign for Secs {
    fn add_assign(&mut self, rhs: Secs) {
        self.0 += rhs.0;
    }
}

impl Sub for Secs {
    type Output = Secs;
    fn sub(self, rhs: Secs) -> Secs {
        Secs(self.0 - rhs.0)
    }
}

// ---------------------------------------------------------------------------------------------

/// A point in or span of simulated time, in integer picoseconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Time(u64);

const TIME_UNITS: &[(&str, u128)] = &[
    ("ps", 1),
    ("ns", 1_000),
    ("us", 1_000_000),
    ("µs", 1_000_000),
    ("ms", 1_000_000_000),
    ("s", 1_000_000_000_000),
];
const TIME_EXPECTED: &str = "ps, ns, us (µs), ms, s";

impl Time {
    /// Time zero.
    pub const ZERO: Time = Time(0);
    /// The largest representable time (about 213 days).
    pub const MAX: Time = Time(u64::MAX);

    /// `ps` picoseconds.
    pub const fn from_ps(ps: u64) -> Self {
        Time(ps)
    }

    /// `ns` nanoseconds.
    pub const fn from_ns(ns: u64) -> Self {
        Time(ns * 1_000)
    }

    /// Microseconds given as a float, rounded to the nearest picosecond.
    pub fn from_us_f64(us: f64) -> Self {
        Time((us * 1e6).round().max(0.0) as u64)
    }

    /// Seconds given as a float, rounded up to the next picosecond (so that a transfer never
    /// completes early).
    pub fn from_secs_f64_ceil(s: f64) -> Self {
        let ps = (s * 1e12).ceil();
        if ps >= u64::MAX as f64 { Time::MAX } else { Time(ps.max(0.0) as u64) }
    }

    /// Picoseconds.
    pub const fn as_ps(self) -> u64 {
        self.0
    }

    /// Microseconds as a float.
    pub fn as_us(self) -> f64 {
        self.0 as f64 / 1e6
    }

    /// Seconds as a float.
    pub fn as_secs_f64(self) -> f64 {
        self.0 as f64 / 1e12
    }

    /// The longest simulated time reported as a number (2^62 ps, about 53 days): anything at
    /// or past it has come near [`Time::MAX`], where sums saturate, and is an error.
    pub const LIMIT: Time = Time(1 << 62);

    /// `Ok(self)` below [`Time::LIMIT`], else an error naming `what` ("all_reduce of 2 MiB").
    pub fn check(self, what: &str) -> Result<Time, String> {
        if self < Time::LIMIT {
            Ok(self)
        } else {
            Err(format!(
                "{what}: simulated time passes {:.0} days, more than collsim reports; is a link far too slow or a size far too large?",
                Time::LIMIT.as_secs_f64() / 86_400.0
            ))
        }
    }

    /// `self + rhs`, saturating at [`Time::MAX`].
    pub fn saturating_add(self, rhs: Time) -> Time {
        Time(self.0.saturating_add(rhs.0))
    }

    /// `self × k`.
    pub fn times(self, k: u64) -> Time {
        Time(self.0.saturating_mul(k))
    }

    /// Parses "1.5 us", "700 ns", "2 ms". A bare number is an error.
    pub fn parse(text: &str) -> Result<Self, UnitError> {
        const EX: &str = "\"1.5 us\"";
        let (num, unit) = split_number(text, EX)?;
        if unit.is_empty() {
            return Err(UnitError::BareNumber(text.to_string(), EX));
        }
        let factor =
            TIME_UNITS.iter().find(|(u, _)| *u == unit).map(|(_, f)| *f).ok_or_else(|| {
                UnitError::UnknownUnit {
                    unit: unit.clone(),
                    text: text.to_string(),
                    expected: TIME_EXPECTED,
                }
            })?;
        num.times(factor).map(Time).ok_or(UnitError::OutOfRange(text.to_string(), "1 ps"))
    }
}

impl fmt::Display for Time {
    /// The largest unit in which the value is a decimal of at most three places ("1.5 us").
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (unit, ps, scale) in [("s", 12u32, 3u32), ("ms", 9, 3), ("us", 6, 3), ("ns", 3, 3)] {
            let step = 10u64.pow(ps - scale);
            if self.0 >= 10u64.pow(ps) && self.0.is_multiple_of(step) {
                return write!(f, "{} {unit}", fmt_scaled(self.0 / step, scale));
            }
        }
        write!(f, "{} ps", self.0)
    }
}

/// Saturates at [`Time::MAX`] (never wraps): a sum that reaches it is caught where results
/// are reported ([`Time::check`]).
impl Add for Time {
    type Output = Time;
    fn add(self, rhs: Time) -> Time {
        self.saturating_add(rhs)
    }
}

impl AddAssign for Time {
    fn add_assign(&mut self, rhs: Time) {
        *self = self.saturating_add(rhs);
    }
}

impl Sub for Time {
    type Output = Time;
    fn sub(self, rhs: Time) -> Time {
        Time(self.0 - rhs.0)
    }
}

// ---------------------------------------------------------------------------------------------

/// A data rate, held exactly as an integer number of bits per second.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Bandwidth(u64);

const BW_EXPECTED: &str = "b/s, kb/s, Mb/s, Gb/s, Tb/s, Gbps, B/s, kB/s, MB/s, GB/s, TB/s, GBps, \
                           KiB/s, MiB/s, GiB/s";

impl Bandwidth {
    /// The slowest rate a file may give (1 Mb/s): slower links would push simulated times of
    /// realistic sizes past what [`Time`] holds.
    pub const MIN: Bandwidth = Bandwidth(1_000_000);

    /// `gbit` gigabits (1e9 bits) per second.
    pub fn from_gbit_per_s(gbit: u64) -> Self {
        Bandwidth(gbit * 1_000_000_000)
    }

    /// `bits` bits per second.
    pub const fn from_bits_per_sec(bits: u64) -> Self {
        Bandwidth(bits)
    }

    /// Gigabytes (1e9 bytes) per second given as a float, rounded to the nearest bit/s.
    pub fn from_gbyte_per_s_f64(gb: f64) -> Self {
        Bandwidth((gb * 8e9).round().max(0.0) as u64)
    }

    /// Bytes per second as a float, the unit used by the rate solver.
    pub fn bytes_per_sec(self) -> f64 {
        self.0 as f64 / 8.0
    }

    /// GB/s (1e9 bytes per second), as nccl-tests and NCCL report bandwidth.
    pub fn gbyte_per_s(self) -> f64 {
        self.0 as f64 / 8e9
    }

    /// Bits per second.
    pub fn bits_per_sec(self) -> u64 {
        self.0
    }

    /// Parses "400 Gb/s", "50 GB/s", "25 GBps", "100 Gbps". Zero and bare numbers are errors.
    pub fn parse(text: &str) -> Result<Self, UnitError> {
        const EX: &str = "\"400 Gb/s\" or \"50 GB/s\"";
        let (num, unit) = split_number(text, EX)?;
        if unit.is_empty() {
            return Err(UnitError::BareNumber(text.to_string(), EX));
        }
        let unknown = || UnitError::UnknownUnit {
            unit: unit.clone(),
            text: text.to_string(),
            expected: BW_EXPECTED,
        };
        let base =
            unit.strip_suffix("/s").or_else(|| unit.strip_suffix("ps")).ok_or_else(unknown)?;
        let (prefix, bits_per_unit) = if let Some(p) = base.strip_suffix('b') {
            (p, 1u128)
        } else if let Some(p) = base.strip_suffix('B') {
            (p, 8u128)
        } else {
            return Err(unknown());
        };
        let scale: u128 = match prefix {
            "" => 1,
            "k" | "K" => 1_000,
            "M" => 1_000_000,
            "G" => 1_000_000_000,
            "T" => 1_000_000_000_000,
            "Ki" if bits_per_unit == 8 => 1 << 10,
            "Mi" if bits_per_unit == 8 => 1 << 20,
            "Gi" if bits_per_unit == 8 => 1 << 30,
            _ => return Err(unknown()),
        };
        if num.is_zero() {
            return Err(UnitError::NotPositive(text.to_string()));
        }
        let bw = num
            .times(scale * bits_per_unit)
            .map(Bandwidth)
            .ok_or(UnitError::OutOfRange(text.to_string(), "1 b/s"))?;
        if bw < Bandwidth::MIN {
            return Err(UnitError::TooSlow(text.to_string()));
        }
        Ok(bw)
    }
}

impl fmt::Display for Bandwidth {
    /// GB/s when the value is a whole number of bytes per second, else Gb/s ("20.6 GB/s").
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0.is_multiple_of(8) {
            write!(f, "{} GB/s", fmt_scaled(self.0 / 8, 9))
        } else {
            write!(f, "{} Gb/s", fmt_scaled(self.0, 9))
        }
    }
}

impl serde::Serialize for Time {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl serde::Serialize for Bandwidth {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn approximate_sizes_take_the_largest_unit_they_fill() {
        assert_eq!(Bytes::new(212).approx(), "212 B");
        assert_eq!(Bytes::new(250 << 20).approx(), "250 MiB");
        assert_eq!(Bytes::new(395280 << 10).approx(), "386.02 MiB");
        assert_eq!(Bytes::new(8196000).approx(), "7.82 MiB");
        assert_eq!(Bytes::new(3 << 30).approx(), "3 GiB");
    }

    #[test]
    fn parses_sizes_with_decimal_and_binary_prefixes() {
        assert_eq!(Bytes::parse("64 MiB").unwrap().get(), 64 << 20);
        assert_eq!(Bytes::parse("1 GB").unwrap().get(), 1_000_000_000);
        assert_eq!(Bytes::parse("1.5KiB").unwrap().get(), 1536);
        assert!(matches!(Bytes::parse("64"), Err(UnitError::BareNumber(..))));
        assert!(Bytes::parse("1.1 B").is_err());
        assert!(Bytes::parse("3 Mb").is_err());
        assert_eq!(Bytes::parse_cli("8").unwrap().get(), 8);
        assert_eq!(Bytes::parse_cli("8G").unwrap().get(), 8 << 30);
        assert_eq!(Bytes::parse_cli("8GiB").unwrap().get(), 8 << 30);
    }

    #[test]
    fn parses_bandwidth_bits_and_bytes_exactly() {
        assert_eq!(Bandwidth::parse("400 Gb/s").unwrap().bytes_per_sec(), 50e9);
        assert_eq!(Bandwidth::parse("50 GB/s").unwrap().bytes_per_sec(), 50e9);
        assert_eq!(Bandwidth::parse("25 GBps").unwrap().bytes_per_sec(), 25e9);
        assert_eq!(Bandwidth::parse("100 Gbps").unwrap().bytes_per_sec(), 12.5e9);
        assert_eq!(Bandwidth::parse("20.6 GB/s").unwrap().bits_per_sec(), 164_800_000_000);
        assert!(matches!(Bandwidth::parse("400"), Err(UnitError::BareNumber(..))));
        assert!(matches!(Bandwidth::parse("0 GB/s"), Err(UnitError::NotPositive(..))));
        assert!(matches!(Bandwidth::parse("-5 GB/s"), Err(UnitError::NotPositive(..))));
        assert!(Bandwidth::parse("5 GHz").is_err());
    }

    #[test]
    fn parses_times() {
        assert_eq!(Time::parse("1.5 us").unwrap().as_ps(), 1_500_000);
        assert_eq!(Time::parse("700 ns").unwrap().as_ps(), 700_000);
        assert_eq!(Time::parse("2 ms").unwrap().as_ps(), 2_000_000_000);
        assert!(matches!(Time::parse("3"), Err(UnitError::BareNumber(..))));
        assert!(Time::parse("0.5 ps").is_err());
    }

    proptest! {
        #[test]
        fn bytes_round_trip(n in 0u64..(1u64 << 50)) {
            let b = Bytes::new(n);
            prop_assert_eq!(Bytes::parse(&b.to_string()).unwrap(), b);
        }

        #[test]
        fn binary_sizes_display_in_their_unit(k in 1u64..4096, shift in prop::sample::select(vec![10u32, 20, 30])) {
            let b = Bytes::new(k << shift);
            prop_assert_eq!(Bytes::parse(&b.to_string()).unwrap(), b);
        }

        #[test]
        fn time_round_trip(ps in 0u64..(1u64 << 60)) {
            let t = Time::from_ps(ps);
            prop_assert_eq!(Time::parse(&t.to_string()).unwrap(), t);
        }

        #[test]
        fn bandwidth_round_trip(bits in 1u64..(1u64 << 60)) {
            let bw = Bandwidth(bits);
            prop_assert_eq!(Bandwidth::parse(&bw.to_string()).unwrap(), bw);
        }
    }
}
