//! CPU features by name, and `KOSTANT_REQUIRE_FEATURES`: the features a test run must find.
//! A SIMD test needs its CPU feature; without it the test is skipped, unless the variable
//! names that feature, and then it fails. CI sets the variable to what its CPU has, so a
//! machine that should check a kernel cannot pass by skipping it (`.ci/run`).

/// The names [`cpu_has`] knows: "avx2" is the AVX2 kernels' AVX2 + FMA + F16C, "avx512vnni"
/// AVX-512 F + VL + VNNI on top of those, "avx512bf16" AVX512_BF16 on top of that; "neon",
/// "dotprod", "i8mm" are aarch64's.
pub const FEATURE_NAMES: [&str; 6] = [
    "avx2",
    "avx512vnni",
    "avx512bf16",
    "neon",
    "dotprod",
    "i8mm",
];

/// Whether this CPU has the feature `name` (one of [`FEATURE_NAMES`]; `None` for any other
/// name). A feature of another architecture is `Some(false)`.
pub fn cpu_has(name: &str) -> Option<bool> {
    if !FEATURE_NAMES.contains(&name) {
        return None;
    }
    #[cfg(target_arch = "x86_64")]
    let has = match name {
        "avx2" => crate::dispatch::has_avx2(),
        "avx512vnni" => crate::dispatch::has_avx512vnni(),
        "avx512bf16" => crate::dispatch::has_avx512bf16(),
        _ => false,
    };
    #[cfg(target_arch = "aarch64")]
    let has = match name {
        "neon" => std::arch::is_aarch64_feature_detected!("neon"),
        "dotprod" => std::arch::is_aarch64_feature_detected!("dotprod"),
        "i8mm" => std::arch::is_aarch64_feature_detected!("i8mm"),
        _ => false,
    };
    #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
    let has = false;
    Some(has)
}

/// The features `KOSTANT_REQUIRE_FEATURES` names (comma-separated, e.g. "avx2,avx512vnni");
/// empty when it is unset.
pub fn required_cpu_features() -> Vec<String> {
    parse_required(&std::env::var("KOSTANT_REQUIRE_FEATURES").unwrap_or_default())
}

fn parse_required(value: &str) -> Vec<String> {
    value
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_string)
        .collect()
}

/// For a test that needs `feature`: true when the CPU has it. Without it, the test should
/// return, and this says so on stderr; but when `KOSTANT_REQUIRE_FEATURES` names the feature
/// this panics instead, so the test fails.
#[doc(hidden)]
pub fn test_needs(feature: &str) -> bool {
    let has = cpu_has(feature).unwrap_or_else(|| panic!("unknown CPU feature name {feature:?}"));
    needs(feature, has, &required_cpu_features())
}

fn needs(feature: &str, has: bool, required: &[String]) -> bool {
    if !has {
        assert!(
            !required.iter().any(|r| r == feature),
            "KOSTANT_REQUIRE_FEATURES names {feature}, but this CPU lacks it"
        );
        eprintln!(
            "skipped: this CPU lacks {feature} (KOSTANT_REQUIRE_FEATURES={feature} fails instead)"
        );
    }
    has
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_variable_is_a_comma_separated_list() {
        assert_eq!(
            parse_required(" avx2, avx512vnni ,"),
            ["avx2", "avx512vnni"]
        );
        assert!(parse_required("").is_empty());
    }

    #[test]
    fn a_missing_feature_skips_unless_required() {
        assert!(needs("avx2", true, &["avx2".into()]));
        assert!(!needs("dotprod", false, &["avx2".into()]));
    }

    #[test]
    #[should_panic(expected = "KOSTANT_REQUIRE_FEATURES names avx512vnni")]
    fn a_required_feature_the_cpu_lacks_fails_the_test() {
        needs("avx512vnni", false, &["avx2".into(), "avx512vnni".into()]);
    }

    #[test]
    fn only_known_names_are_answered() {
        for name in FEATURE_NAMES {
            assert!(cpu_has(name).is_some());
        }
        assert_eq!(cpu_has("avx3"), None);
        // One architecture's features are never another's.
        #[cfg(target_arch = "x86_64")]
        assert_eq!(cpu_has("dotprod"), Some(false));
        #[cfg(target_arch = "aarch64")]
        assert_eq!(cpu_has("avx2"), Some(false));
    }
}
