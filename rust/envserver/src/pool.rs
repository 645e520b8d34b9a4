//! EnvPool (being written).
pub struct EnvPool;
#[derive(Debug)]
pub struct PoolError;
pub struct StepResult;
