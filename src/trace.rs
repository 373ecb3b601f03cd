//! Loss-curve files: one JSON object per line, as in `shared/data/curves-public.jsonl`.

use std::path::Path;

/// One recorded training run.
#[derive(Clone, Debug, PartialEq, serde::Deserialize, serde::Serialize)]
pub struct TraceCurve {
    pub id: String,
    pub family: String,
    #[serde(default)]
    pub dataset: String,
    /// Loss after each iteration, iteration 1 first.
    pub loss: Vec<f64>,
    /// Measured seconds of each iteration on one core; absent in some traces.
    #[serde(default)]
    pub iter_seconds: Option<Vec<f64>>,
}

#[derive(Debug, thiserror::Error)]
pub enum TraceError {
    #[error("cannot read {path}")]
    Io { path: String, source: std::io::Error },
    #[error("{path}:{line}: not a curve")]
    Json { path: String, line: usize, source: serde_json::Error },
    #[error("{path}:{line}: curve {id:?} {problem}")]
    Invalid { path: String, line: usize, id: String, problem: &'static str },
    #[error("{path}: no curves")]
    Empty { path: String },
}

/// Reads every curve of a JSON-lines file; blank lines are skipped, anything else malformed is
/// an error naming the line.
pub fn load_curves(path: &Path) -> Result<Vec<TraceCurve>, TraceError> {
    let display = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|source| TraceError::Io { path: display.clone(), source })?;
    parse_curves(&text, &display)
}

/// Parses JSON-lines text; `origin` names it in errors.
pub fn parse_curves(text: &str, origin: &str) -> Result<Vec<TraceCurve>, TraceError> {
    let mut curves = Vec::new();
    for (index, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let line_no = index + 1;
        let curve: TraceCurve = serde_json::from_str(line).map_err(|source| TraceError::Json {
            path: origin.to_string(),
            line: line_no,
            source,
        })?;
        let invalid =
            |problem| TraceError::Invalid { path: origin.to_string(), line: line_no, id: curve.id.clone(), problem };
        if curve.loss.len() < 2 {
            return Err(invalid("has fewer than two losses"));
        }
        if curve.loss.iter().any(|l| !l.is_finite()) {
            return Err(invalid("has a non-finite loss"));
        }
        if let Some(secs) = &curve.iter_seconds {
            if secs.len() != curve.loss.len() {
                return Err(invalid("has iter_seconds of a different length than loss"));
            }
            if secs.iter().any(|s| !(s.is_finite() && *s > 0.0)) {
                return Err(invalid("has a non-positive or non-finite iter_seconds"));
            }
        }
        curves.push(curve);
    }
    if curves.is_empty() {
        return Err(TraceError::Empty { path: origin.to_string() });
    }
    Ok(curves)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_names_bad_lines() {
        let good = r#"{"id":"a","family":"svm","loss":[1.0,0.5],"iter_seconds":[0.1,0.1]}"#;
        let curves = parse_curves(&format!("{good}\n\n{good}\n"), "x").unwrap();
        assert_eq!(curves.len(), 2);
        assert!(curves[0].iter_seconds.is_some());
        let err = parse_curves(&format!("{good}\n{{oops\n"), "x").unwrap_err().to_string();
        assert!(err.starts_with("x:2:"), "{err}");
        let short = r#"{"id":"b","family":"svm","loss":[1.0]}"#;
        assert!(parse_curves(short, "x").unwrap_err().to_string().contains("fewer than two"));
        let mismatch = r#"{"id":"c","family":"svm","loss":[1.0,0.5],"iter_seconds":[0.1]}"#;
        assert!(parse_curves(mismatch, "x").is_err());
        assert!(parse_curves("\n", "x").is_err());
    }
}
