//! Kubernetes quantities as bytes, and bytes as people read them (pure): what the agent's capacity metrics and the
//! extender's capacity checks share.

/// Bytes in a Kubernetes quantity (`10Gi`, `1.5G`, `500M`, `1e9`, `100m`), rounded up to a whole byte.
/// `None` for text that is not a quantity.
pub fn parse_quantity(text: &str) -> Option<u128> {
    let text = text.trim();
    let split = text
        .find(|c: char| !(c.is_ascii_digit() || c == '.' || c == '+'))
        .unwrap_or(text.len());
    let (number, suffix) = text.split_at(split);
    let (mut mult_num, mut mult_den): (u128, u128) = match suffix {
        "" => (1, 1),
        "Ki" => (1 << 10, 1),
        "Mi" => (1 << 20, 1),
        "Gi" => (1 << 30, 1),
        "Ti" => (1 << 40, 1),
        "Pi" => (1 << 50, 1),
        "Ei" => (1 << 60, 1),
        "m" => (1, 1000),
        "k" => (1_000, 1),
        "M" => (1_000_000, 1),
        "G" => (1_000_000_000, 1),
        "T" => (1_000_000_000_000, 1),
        "P" => (1_000_000_000_000_000, 1),
        "E" => (1_000_000_000_000_000_000, 1),
        s if s.starts_with(['e', 'E']) => {
            let exp: i32 = s[1..].parse().ok()?;
            if !(-30..=30).contains(&exp) {
                return None;
            }
            if exp >= 0 {
                (10u128.pow(exp as u32), 1)
            } else {
                (1, 10u128.pow((-exp) as u32))
            }
        }
        _ => return None,
    };
    let number = number.strip_prefix('+').unwrap_or(number);
    let (whole, frac) = number.split_once('.').unwrap_or((number, ""));
    if whole.is_empty() && frac.is_empty() || frac.len() > 18 {
        return None;
    }
    let digits: u128 = format!("{whole}{frac}").parse().ok()?;
    mult_den = mult_den.checked_mul(10u128.pow(frac.len() as u32))?;
    mult_num = mult_num.checked_mul(digits)?;
    Some(mult_num.div_ceil(mult_den))
}

/// Human form of a byte count for reasons: binary units when exact, else bytes.
pub fn format_bytes(bytes: u128) -> String {
    for (unit, shift) in [
        ("Ei", 60),
        ("Pi", 50),
        ("Ti", 40),
        ("Gi", 30),
        ("Mi", 20),
        ("Ki", 10),
    ] {
        if bytes != 0 && bytes.is_multiple_of(1u128 << shift) {
            return format!("{}{unit}", bytes >> shift);
        }
    }
    if bytes >= 1 << 30 {
        return format!("{:.1}Gi", bytes as f64 / (1u64 << 30) as f64);
    }
    bytes.to_string()
}

#[cfg(test)]
mod tests {
    use rstest::rstest;

    use super::*;

    #[rstest]
    #[case("10Gi", Some(10 << 30))]
    #[case("1.5Gi", Some(3 << 29))]
    #[case("500M", Some(500_000_000))]
    #[case("1e9", Some(1_000_000_000))]
    #[case("1E3", Some(1_000))]
    #[case("100m", Some(1))]
    #[case("4096", Some(4096))]
    #[case("+2Ki", Some(2048))]
    #[case("10Xi", None)]
    #[case("", None)]
    #[case("Gi", None)]
    fn quantities_parse_to_bytes_rounded_up(#[case] text: &str, #[case] want: Option<u128>) {
        assert_eq!(parse_quantity(text), want);
    }

    #[rstest]
    #[case(10 << 30, "10Gi")]
    #[case(512 << 20, "512Mi")]
    #[case(1_500_000_000, "1.4Gi")]
    #[case(1000, "1000")]
    fn byte_counts_format_in_binary_units(#[case] bytes: u128, #[case] want: &str) {
        assert_eq!(format_bytes(bytes), want);
    }
}
