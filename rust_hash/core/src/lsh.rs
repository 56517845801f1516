//! datasketch's choice of LSH banding (b bands of r rows) for a Jaccard threshold.
//!
//! `MinHashLSH` picks the (b, r) with b * r <= num_perm that minimises the weighted areas of
//! false positives, integral over [0, t] of P(s), and false negatives, integral over [t, 1] of
//! 1 - P(s), where P(s) = 1 - (1 - s^r)^b is the chance that a pair of similarity s shares a band.
//! datasketch integrates with scipy's `quad`; adaptive Simpson to 1e-13 reaches the same optimum.

/// Probability that two sets of Jaccard similarity `s` share at least one of `b` bands of `r` rows.
fn collision_probability(s: f64, b: usize, r: usize) -> f64 {
    1.0 - (1.0 - s.powi(r as i32)).powi(b as i32)
}

fn simpson(a: f64, b: f64, fa: f64, fm: f64, fb: f64) -> f64 {
    (b - a) / 6.0 * (fa + 4.0 * fm + fb)
}

/// Adaptive Simpson quadrature to absolute tolerance `tol`.
fn integrate(f: &impl Fn(f64) -> f64, a: f64, b: f64, tol: f64) -> f64 {
    #[allow(clippy::too_many_arguments)]
    fn recurse(
        f: &impl Fn(f64) -> f64,
        a: f64,
        b: f64,
        fa: f64,
        fm: f64,
        fb: f64,
        whole: f64,
        tol: f64,
        depth: u32,
    ) -> f64 {
        let m = 0.5 * (a + b);
        let (lm, rm) = (0.5 * (a + m), 0.5 * (m + b));
        let (flm, frm) = (f(lm), f(rm));
        let left = simpson(a, m, fa, flm, fm);
        let right = simpson(m, b, fm, frm, fb);
        if depth == 0 || (left + right - whole).abs() <= 15.0 * tol {
            return left + right + (left + right - whole) / 15.0;
        }
        recurse(f, a, m, fa, flm, fm, left, tol / 2.0, depth - 1)
            + recurse(f, m, b, fm, frm, fb, right, tol / 2.0, depth - 1)
    }
    let (fa, fb, fm) = (f(a), f(b), f(0.5 * (a + b)));
    recurse(f, a, b, fa, fm, fb, simpson(a, b, fa, fm, fb), tol, 40)
}

/// The (bands, rows) datasketch's `MinHashLSH(threshold, num_perm, weights)` would use, for any
/// `threshold` in [0, 1] (datasketch's domain, both ends included) and `num_perm >= 1`.
pub fn optimal_param(
    threshold: f64,
    num_perm: usize,
    fp_weight: f64,
    fn_weight: f64,
) -> (usize, usize) {
    let mut best = (f64::INFINITY, (0, 0));
    for b in 1..=num_perm {
        for r in 1..=num_perm / b {
            let fp = integrate(&|s| collision_probability(s, b, r), 0.0, threshold, 1e-13);
            let fneg = integrate(
                &|s| 1.0 - collision_probability(s, b, r),
                threshold,
                1.0,
                1e-13,
            );
            let error = fp * fp_weight + fneg * fn_weight;
            // Strict `<` keeps the first minimum in datasketch's scan order.
            if error < best.0 {
                best = (error, (b, r));
            }
        }
    }
    best.1
}

#[cfg(test)]
mod tests {
    use super::optimal_param;

    #[test]
    fn datasketch_choices_at_128() {
        for (t, expected) in [
            (0.5, (25, 5)),
            (0.7, (14, 9)),
            (0.8, (9, 13)),
            (0.9, (5, 25)),
            (0.95, (3, 42)),
        ] {
            assert_eq!(optimal_param(t, 128, 0.5, 0.5), expected, "threshold {t}");
        }
        assert_eq!(optimal_param(0.8, 16, 0.5, 0.5), (2, 8));
        // Both ends of the domain, as datasketch chooses them.
        assert_eq!(optimal_param(0.0, 128, 0.5, 0.5), (128, 1));
        assert_eq!(optimal_param(1.0, 128, 0.5, 0.5), (1, 128));
        assert_eq!(optimal_param(0.0, 16, 0.5, 0.5), (16, 1));
        assert_eq!(optimal_param(1.0, 16, 0.5, 0.5), (1, 16));
        assert_eq!(optimal_param(0.3, 64, 0.3, 0.7), (19, 2));
    }
}
