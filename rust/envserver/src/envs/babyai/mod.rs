//! PLACEHOLDER, replaced by the real env. Keeps the crate compiling meanwhile.

use crate::env::{EnvError, EnvFactory, Options, StepOutcome, TextEnv};

pub struct BabyAiFactory;

impl BabyAiFactory {
    pub fn new(_options: &Options) -> Result<Self, EnvError> {
        Ok(Self)
    }
}

struct Placeholder(String);

impl TextEnv for Placeholder {
    fn reset(&mut self, task_id: u64) -> Result<String, EnvError> {
        self.0 = format!("task {task_id}");
        Ok(self.0.clone())
    }
    fn step(&mut self, action: &str) -> StepOutcome {
        self.0 = format!("you did {action}");
        StepOutcome { observation: self.0.clone(), reward: 0.0, done: action == "win" }
    }
    fn observation(&self) -> String {
        self.0.clone()
    }
}

impl EnvFactory for BabyAiFactory {
    fn name(&self) -> &str {
        "babyai"
    }
    fn num_tasks(&self) -> u64 {
        100
    }
    fn make(&self) -> Box<dyn TextEnv> {
        Box::new(Placeholder(String::new()))
    }
}
