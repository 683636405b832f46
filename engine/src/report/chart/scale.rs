//! Axis scales: a "nice" top and step for a range of values, tick labels, and the SI prefix
//! that keeps tick labels short (`2.5` on a `Gbit/s` axis rather than `2500000000`).

/// A "nice" axis top and step (1, 2 or 5 times a power of ten) for values from 0 up to `max`.
pub fn nice_scale(max: f64) -> (f64, f64) {
    if !(max.is_finite() && max > 0.0) {
        return (1.0, 0.2);
    }
    // A value a hair over a round number (a 1.0001 s interval end) draws at that number
    // rather than doubling the axis.
    let max = max * (1.0 - 1e-3);
    let raw = max / 5.0;
    let pow = 10f64.powf(raw.log10().floor());
    let step = [1.0, 2.0, 5.0, 10.0].iter().map(|m| m * pow).find(|s| *s >= raw).unwrap_or(10.0 * pow);
    ((max / step).ceil() * step, step)
}

/// The tick values from 0 to `top` by `step` (both from [`nice_scale`]).
pub fn ticks(top: f64, step: f64) -> Vec<f64> {
    let n = (top / step).round() as usize;
    // Multiplying rather than adding keeps 0.1 + 0.2 style drift out of the labels.
    (0..=n).map(|i| i as f64 * step).collect()
}

/// A tick value with as many decimals as its step needs.
pub fn fmt_tick(v: f64, step: f64) -> String {
    let decimals = if step >= 1.0 { 0 } else { (-step.log10().floor()) as usize };
    format!("{v:.decimals$}")
}

/// The SI prefix for values up to `max`: the divisor and the prefix (`1e9`, `"G"`), chosen so
/// the largest value reads between 1 and 1000.
pub fn si_prefix(max: f64) -> (f64, &'static str) {
    const PREFIXES: [(f64, &str); 9] = [
        (1e15, "P"),
        (1e12, "T"),
        (1e9, "G"),
        (1e6, "M"),
        (1e3, "k"),
        (1.0, ""),
        (1e-3, "m"),
        (1e-6, "µ"),
        (1e-9, "n"),
    ];
    let m = max.abs();
    if !(m.is_finite() && m > 0.0) {
        return (1.0, "");
    }
    PREFIXES.iter().copied().find(|(d, _)| m >= *d).unwrap_or(PREFIXES[PREFIXES.len() - 1])
}

/// `value unit` with an SI prefix and three significant-ish digits: `9.41 Gbit/s`, `120 µs`.
pub fn si(value: f64, unit: &str) -> String {
    if !value.is_finite() {
        return format!("n/a {unit}");
    }
    let (div, prefix) = si_prefix(value);
    let v = value / div;
    let decimals = if v.abs() >= 100.0 || v == 0.0 {
        0
    } else if v.abs() >= 10.0 {
        1
    } else {
        2
    };
    format!("{v:.decimals$} {prefix}{unit}")
}

/// An axis for values from 0 to `max` in `unit`: its prefix divisor, the unit with the prefix,
/// the top in raw units, the raw tick values and their labels (in prefixed units).
#[derive(Debug, Clone, PartialEq)]
pub struct UnitAxis {
    pub divisor: f64,
    pub unit: String,
    pub top: f64,
    pub ticks: Vec<(f64, String)>,
}

impl UnitAxis {
    pub fn new(max: f64, unit: &str) -> Self {
        let (divisor, prefix) = if unit.is_empty() || unit == "%" { (1.0, "") } else { si_prefix(max) };
        let (top, step) = nice_scale(max / divisor);
        let ticks = ticks(top, step).into_iter().map(|t| (t * divisor, fmt_tick(t, step))).collect();
        Self { divisor, unit: format!("{prefix}{unit}"), top: top * divisor, ticks }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scales() {
        assert_eq!(nice_scale(18.3), (20.0, 5.0));
        let (top, step) = nice_scale(0.13);
        assert!((step - 0.05).abs() < 1e-12 && (top - 0.15).abs() < 1e-9, "{top} {step}");
        assert_eq!(nice_scale(100.0), (100.0, 20.0));
        assert_eq!(nice_scale(0.0), (1.0, 0.2));
        assert_eq!(nice_scale(f64::NAN), (1.0, 0.2));
        assert_eq!(nice_scale(10.0004), (10.0, 2.0), "a hair over a round top stays on it");
        assert_eq!(fmt_tick(0.05, 0.05), "0.05");
        assert_eq!(fmt_tick(10.0, 5.0), "10");
    }

    #[test]
    fn ticks_reach_the_top_without_drift() {
        let (top, step) = nice_scale(0.7);
        let t = ticks(top, step);
        assert_eq!(t.len(), 5, "{t:?}");
        let labels: Vec<String> = t.iter().map(|v| fmt_tick(*v, step)).collect();
        assert_eq!(labels, ["0.0", "0.2", "0.4", "0.6", "0.8"]);
    }

    #[test]
    fn si_prefixes() {
        assert_eq!(si_prefix(9.4e9), (1e9, "G"));
        assert_eq!(si_prefix(999.0), (1.0, ""));
        assert_eq!(si_prefix(1000.0), (1e3, "k"));
        assert_eq!(si_prefix(120e-6), (1e-6, "µ"));
        assert_eq!(si_prefix(0.0), (1.0, ""));
        assert_eq!(si_prefix(f64::INFINITY), (1.0, ""));
        assert_eq!(si(9.412e9, "bit/s"), "9.41 Gbit/s");
        assert_eq!(si(120e-6, "s"), "120 µs");
        assert_eq!(si(37.5e6, "bit/s"), "37.5 Mbit/s");
        assert_eq!(si(0.0, "bit/s"), "0 bit/s");
    }

    #[test]
    fn unit_axis_labels_in_prefixed_units() {
        let a = UnitAxis::new(9.4e9, "bit/s");
        assert_eq!(a.unit, "Gbit/s");
        assert_eq!(a.top, 10e9);
        let labels: Vec<&str> = a.ticks.iter().map(|(_, l)| l.as_str()).collect();
        assert_eq!(labels, ["0", "2", "4", "6", "8", "10"]);
        assert_eq!(a.ticks[1].0, 2e9);
        let pct = UnitAxis::new(87.0, "%");
        assert_eq!((pct.unit.as_str(), pct.top), ("%", 100.0));
    }
}
