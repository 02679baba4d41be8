//! The host's tests without a Neovim, in one binary (one link of the whole crate instead of
//! one per file): the command line (`cli`, `cli_next_steps`, `crash`), code loops it runs
//! (`code_loop`), HTTPS to the model API (`tls`), and the fake model servers themselves
//! (`fake_server_selftest`).

#[path = "support/fake_llm.rs"]
mod fake_llm;
#[path = "support/nvim.rs"]
mod nvim;
#[path = "support/sandboxed.rs"]
mod sandboxed;
#[path = "support/scenario.rs"]
mod scenario;

mod host {
    mod cli;
    mod cli_next_steps;
    mod code_loop;
    mod crash;
    mod fake_server_selftest;
    mod tls;
}
