//! Java: Maven's `pom.xml` (its `dependencies`, versions set in the file
//! itself, `${property}` resolved from its `properties`) and Gradle's
//! dependency lockfile (`group:artifact:version=configurations`).

use std::collections::HashMap;

use super::Package;
use crate::doctor::LineError;

/// The dependencies a pom.xml declares, as `groupId:artifactId`. A version
/// from a parent POM, a BOM (`dependencyManagement` import) or a property
/// the file does not set is reported as not resolved.
///
/// # Errors
/// Malformed XML (at its line).
pub fn pom(text: &str) -> Result<Vec<Package>, LineError> {
    let doc = roxmltree::Document::parse(text).map_err(|e| LineError {
        line: Some(e.pos().row as usize),
        message: format!("not XML: {e}"),
    })?;
    let child_text = |node: roxmltree::Node, name: &str| {
        node.children()
            .find(|c| c.has_tag_name(name))
            .and_then(|c| c.text())
            .map(|t| t.trim().to_owned())
    };
    let root = doc.root_element();
    let mut properties = HashMap::new();
    if let Some(props) = root.children().find(|c| c.has_tag_name("properties")) {
        for p in props.children().filter(|c| c.is_element()) {
            properties.insert(
                p.tag_name().name().to_owned(),
                p.text().unwrap_or_default().trim().to_owned(),
            );
        }
    }
    if let Some(v) = child_text(root, "version") {
        properties.insert("project.version".into(), v);
    }
    let mut out = Vec::new();
    for dep in root.descendants().filter(|n| n.has_tag_name("dependency")) {
        // Dependencies only (a BOM import in dependencyManagement is no dependency of the code).
        let in_management = dep.ancestors().any(|a| a.has_tag_name("dependencyManagement"));
        if in_management {
            continue;
        }
        let (Some(group), Some(artifact)) = (child_text(dep, "groupId"), child_text(dep, "artifactId")) else {
            continue;
        };
        let line = Some(doc.text_pos_at(dep.range().start).row as usize);
        let name = format!("{group}:{artifact}");
        let version = child_text(dep, "version");
        let resolved = match version.as_deref() {
            None => Err("no version in the file (from a parent POM or a BOM)".to_owned()),
            Some(v) => match v.strip_prefix("${").and_then(|r| r.strip_suffix('}')) {
                Some(prop) => properties
                    .get(prop)
                    .cloned()
                    .ok_or_else(|| format!("${{{prop}}} is not set in the file (from a parent POM)")),
                None => Ok(v.to_owned()),
            },
        };
        out.push(match resolved {
            Ok(v) => Package::locked(name, v, line),
            Err(why) => Package {
                name,
                version: None,
                unresolved: Some(why),
                line,
            },
        });
    }
    Ok(out)
}

/// The dependencies of a Gradle lockfile: `group:artifact:version=confs`
/// lines; `#` comments and `empty=` skipped.
///
/// # Errors
/// A line that is not `group:artifact:version=…` (at its line).
pub fn gradle_lockfile(text: &str) -> Result<Vec<Package>, LineError> {
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') || line.starts_with("empty=") {
            continue;
        }
        let coordinates = line.split('=').next().unwrap_or_default();
        let parts: Vec<&str> = coordinates.split(':').collect();
        match parts.as_slice() {
            [group, artifact, version] if !group.is_empty() && !artifact.is_empty() && !version.is_empty() => {
                out.push(Package::locked(format!("{group}:{artifact}"), *version, Some(i + 1)));
            }
            _ => {
                return Err(LineError::at(
                    i + 1,
                    format!("not `group:artifact:version=configurations`: `{line}`"),
                ));
            }
        }
    }
    Ok(out)
}
