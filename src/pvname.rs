//! PersistentVolume names: ours (readable, 64-bit hash) and the reference provisioner's (32-bit FNV-1a).
//!
//! Both are pure functions of (node, class, entry), so a restarted agent computes the same name for the same disk
//! and a create that races a previous run meets `AlreadyExists` instead of making a duplicate.

const FNV32_OFFSET: u32 = 0x811c_9dc5;
const FNV32_PRIME: u32 = 0x0100_0193;
const FNV64_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
const FNV64_PRIME: u64 = 0x0000_0100_0000_01b3;

/// Longest node and entry fragments kept in our names; the hash carries uniqueness, these carry readability.
const NODE_PART_MAX: usize = 24;
const ENTRY_PART_MAX: usize = 24;

/// The reference provisioner's name: `local-pv-` and the lowercase hex (no padding) of 32-bit FNV-1a over
/// entry, node and class concatenated without separator. NB: 32 bits collide at scale, and the missing separator
/// makes ("ab", "c") and ("a", "bc") the same input; use it only for compatibility.
pub fn reference_name(entry: &str, node: &str, class: &str) -> String {
    let hash = [entry, node, class]
        .iter()
        .flat_map(|part| part.bytes())
        .fold(FNV32_OFFSET, |hash, byte| {
            (hash ^ u32::from(byte)).wrapping_mul(FNV32_PRIME)
        });
    format!("local-pv-{hash:x}")
}

/// Our name: `localpv-<node>-<entry>-<16 hex>`, a valid DNS-1123 subdomain of at most 74 characters.
///
/// The hash is 64-bit FNV-1a over node, class and entry, each followed by a NUL byte (which none of them can
/// contain), so distinct triples never share an input. The readable fragments are lowercased, reduced to
/// `[a-z0-9-]` and truncated; they never decide uniqueness.
pub fn localpv_name(node: &str, class: &str, entry: &str) -> String {
    let hash = [node, class, entry]
        .iter()
        .flat_map(|part| part.bytes().chain([0]))
        .fold(FNV64_OFFSET, |hash, byte| {
            (hash ^ u64::from(byte)).wrapping_mul(FNV64_PRIME)
        });
    let mut name = String::from("localpv");
    for fragment in [
        readable(node, NODE_PART_MAX),
        readable(entry, ENTRY_PART_MAX),
    ] {
        if !fragment.is_empty() {
            name.push('-');
            name.push_str(&fragment);
        }
    }
    name.push_str(&format!("-{hash:016x}"));
    name
}

/// Lowercase alphanumerics with single dashes for everything else, trimmed of dashes, at most `max` chars.
fn readable(text: &str, max: usize) -> String {
    let mut out = String::with_capacity(max);
    for c in text.chars() {
        let c = c.to_ascii_lowercase();
        if c.is_ascii_lowercase() || c.is_ascii_digit() {
            out.push(c);
        } else if !out.is_empty() && !out.ends_with('-') {
            out.push('-');
        }
        if out.len() >= max {
            break;
        }
    }
    out.truncate(max);
    out.trim_end_matches('-').to_string()
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;

    use rstest::rstest;

    use super::*;
    use crate::config::values::is_dns_subdomain;

    /// FNV-1a 32 of the single byte `a` (0x61), by hand:
    /// offset 0x811c9dc5 xor 0x61 = 0x811c9da4; 0x811c9da4 * 0x01000193 mod 2^32
    ///   = 0x811c9da4 * 0x193 + (0x811c9da4 << 24) mod 2^32
    ///   = 0xcb_40c2_8f2c + 0xa4_000000 (low 32 bits: 0x40c28f2c + 0xa4000000) = 0xe40c292c.
    #[rstest]
    #[case::single_byte_by_hand("a", "", "", "local-pv-e40c292c")]
    #[case::empty_input_is_the_offset_basis("", "", "", "local-pv-811c9dc5")]
    #[case::parts_are_concatenated_without_separator("foo", "ba", "r", "local-pv-bf9cf968")]
    #[case::same_bytes_split_elsewhere_give_the_same_name("f", "oob", "ar", "local-pv-bf9cf968")]
    #[case::walkthrough_volume("vol1", "node-1", "local-storage", "local-pv-e3f48c6a")]
    #[case::small_hash_is_not_zero_padded("vol16", "node-1", "local-storage", "local-pv-e30ee8e")]
    fn reference_names_match_the_reference_provisioner(
        #[case] entry: &str,
        #[case] node: &str,
        #[case] class: &str,
        #[case] expected: &str,
    ) {
        assert_eq!(reference_name(entry, node, class), expected);
    }

    #[test]
    fn hand_computation_of_the_single_byte_case_holds() {
        let product = 0x811c_9da4_u64 * 0x0100_0193;
        assert_eq!(product as u32, 0xe40c_292c);
    }

    #[rstest]
    #[case::plain("node-1", "local-storage", "vol1", "localpv-node-1-vol1-")]
    #[case::fqdn_node(
        "ip-10-0-1-23.ec2.internal",
        "fast",
        "nvme0",
        "localpv-ip-10-0-1-23-ec2-interna-nvme0-"
    )]
    #[case::odd_entry("n1", "c", "Disk_A..B", "localpv-n1-disk-a-b-")]
    #[case::entry_without_readable_chars("n1", "c", "___", "localpv-n1-")]
    #[case::long_entry("n1", "c", &"x".repeat(300), "localpv-n1-xxxxxxxxxxxxxxxxxxxxxxxx-")]
    fn our_names_are_readable_and_valid(
        #[case] node: &str,
        #[case] class: &str,
        #[case] entry: &str,
        #[case] prefix: &str,
    ) {
        let name = localpv_name(node, class, entry);
        assert!(
            name.starts_with(prefix),
            "{name} should start with {prefix}"
        );
        assert_eq!(name.len(), prefix.len() + 16, "{name}");
        assert!(
            is_dns_subdomain(&name) && name.len() <= 253,
            "{name} is not a DNS-1123 subdomain"
        );
    }

    #[test]
    fn our_names_are_deterministic() {
        assert_eq!(
            localpv_name("n1", "c", "vol1"),
            localpv_name("n1", "c", "vol1")
        );
    }

    #[rstest]
    #[case::class_differs(("n1", "a", "vol1"), ("n1", "b", "vol1"))]
    #[case::node_differs(("n1", "c", "vol1"), ("n2", "c", "vol1"))]
    #[case::separator_matters(("n1", "ab", "c"), ("n1", "a", "bc"))]
    #[case::same_readable_fragment(("n1", "c", "vol.1"), ("n1", "c", "vol_1"))]
    fn distinct_triples_get_distinct_names(
        #[case] a: (&str, &str, &str),
        #[case] b: (&str, &str, &str),
    ) {
        assert_ne!(localpv_name(a.0, a.1, a.2), localpv_name(b.0, b.1, b.2));
    }

    #[test]
    fn one_hundred_thousand_volumes_get_distinct_names() {
        let mut names = HashSet::new();
        for node in 0..100 {
            for entry in 0..1000 {
                let name = localpv_name(
                    &format!("node-{node}"),
                    "local-storage",
                    &format!("vol{entry}"),
                );
                assert!(names.insert(name), "collision at node-{node} vol{entry}");
            }
        }
        assert_eq!(names.len(), 100_000);
    }

    #[test]
    fn reference_names_collide_where_ours_do_not() {
        // Shows why ours is the default: the reference hash gives equal names to these distinct volumes.
        assert_eq!(
            reference_name("f", "oob", "ar"),
            reference_name("foo", "ba", "r")
        );
        assert_ne!(
            localpv_name("oob", "ar", "f"),
            localpv_name("ba", "r", "foo")
        );
    }
}
