//! Operator commands, a file each: `lab`, `dev`, `shadow`, `dead-letters`, `relay`,
//! and `migrate`/`check`/`build` (in `build`). A command that needs a piece of
//! the consume path calls a public function of `app::consume`.

mod build;
mod dead_letters;
mod dev;
mod lab;
mod relay;
mod shadow;

pub use build::{build, check, migrate};
pub use dead_letters::dead_letters;
pub use dev::dev;
pub use lab::{lab, LabRow};
pub use relay::relay;
pub use shadow::shadow;
