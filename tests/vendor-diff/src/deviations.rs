//! `deviations.toml`: the driver's deliberate differences from the vendor,
//! each with its reason. A minimal reader for the file's one shape:
//! `[[deviation]]` tables of `id = "…"` and `reason = "…"` lines.

/// The listed deviations.
#[derive(Debug, Default)]
pub struct Deviations {
    pub list: Vec<(String, String)>,
}

fn value(line: &str, key: &str) -> Option<String> {
    let rest = line.strip_prefix(key)?.trim_start().strip_prefix('=')?.trim();
    let inner = rest.strip_prefix('"')?.strip_suffix('"')?;
    Some(inner.replace("\\\"", "\""))
}

/// Reads the file at `path`.
pub fn load(path: &str) -> Result<Deviations, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{path}: {e}"))?;
    parse(&text).map_err(|e| format!("{path}: {e}"))
}

/// Parses the file's text.
pub fn parse(text: &str) -> Result<Deviations, String> {
    let mut d = Deviations::default();
    let mut cur: Option<(Option<String>, Option<String>)> = None;
    let mut flush = |cur: &mut Option<(Option<String>, Option<String>)>| -> Result<(), String> {
        if let Some((id, reason)) = cur.take() {
            match (id, reason) {
                (Some(i), Some(r)) if !r.trim().is_empty() => d.list.push((i, r)),
                (i, _) => return Err(format!("deviation {i:?} needs an id and a reason")),
            }
        }
        Ok(())
    };
    for (n, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        if line == "[[deviation]]" {
            flush(&mut cur)?;
            cur = Some((None, None));
        } else if let Some(c) = cur.as_mut() {
            if let Some(v) = value(line, "id") {
                c.0 = Some(v);
            } else if let Some(v) = value(line, "reason") {
                c.1 = Some(v);
            } else if !line.starts_with("driver") && !line.starts_with("vendor") {
                return Err(format!("line {}: unknown key: {line}", n + 1));
            }
        } else {
            return Err(format!("line {}: outside a [[deviation]] table", n + 1));
        }
    }
    flush(&mut cur)?;
    Ok(d)
}

impl Deviations {
    /// The listed ids must be exactly those the classifier knows: a stale
    /// entry or an unlisted classification is an error, not a skip.
    pub fn check_known(&self, known: &[&str]) -> Result<(), String> {
        for (id, _) in &self.list {
            if !known.contains(&id.as_str()) {
                return Err(format!(
                    "deviations.toml lists `{id}`, which the harness never classifies"
                ));
            }
        }
        for k in known {
            if !self.list.iter().any(|(i, _)| i == k) {
                return Err(format!(
                    "the harness classifies `{k}`, which deviations.toml does not list"
                ));
            }
        }
        Ok(())
    }

    pub fn reason(&self, id: &str) -> &str {
        self.list.iter().find(|(i, _)| i == id).map_or("?", |(_, r)| r.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_file_parses_and_a_missing_reason_is_refused() {
        let _serial = crate::serial();
        let d = parse(include_str!("../deviations.toml")).unwrap();
        assert!(!d.list.is_empty());
        assert!(parse("[[deviation]]\nid = \"x\"\n").is_err());
        assert!(parse("[[deviation]]\nid = \"x\"\nreason = \"why\"\n").unwrap().list.len() == 1);
    }
}
