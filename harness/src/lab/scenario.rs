//! [`Scenario`]: one scenario run of a scenario file, as [`crate::lab::load_scenarios`]
//! loads it and [`crate::lab::Lab::run`] runs it.

/// One scenario run: a scenario file, or one parameter combination of a
/// file with `params` (docs/src/scenario-format.md).
#[derive(Clone, Debug)]
pub struct Scenario(pub(crate) crate::scenario::Scenario);

impl Scenario {
    /// The run's name: the file's `name`, with `[k=v]` for a parameter
    /// combination (the matrix's row).
    pub fn name(&self) -> &str {
        &self.0.name
    }

    /// The file's `description`: what the scenario shows.
    pub fn description(&self) -> &str {
        &self.0.description
    }
}
