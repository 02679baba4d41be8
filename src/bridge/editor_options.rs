//! The options of `setup()` only the Neovim shell reads (the host never sees them): defined
//! here, next to the host's `LoopSettings`, so that the whole `setup()` table has one
//! definition from which `loopr generate` writes the Lua checks, types and help.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// A default the Lua side computes: `{stdpath:<what>}/<file>` is
/// `vim.fs.joinpath(vim.fn.stdpath(<what>), <file>)`.
pub const STDPATH_PREFIX: &str = "{stdpath:";

/// Where Loopr's windows (artifacts such as `plan.md`, the status list, transcripts) open.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Layout {
    #[default]
    Vsplit,
    Split,
    Tab,
}

/// How much the host writes to its log.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum LogLevel {
    Error,
    Warn,
    #[default]
    Info,
    Debug,
    Trace,
}

/// The Neovim shell's own options.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct EditorOptions {
    /// Path to the host binary; nil means auto-detect.
    #[schemars(length(min = 1))]
    pub bin: Option<String>,
    /// Where Loopr's windows open: a split to the right, a split below, or a new tab page.
    pub layout: Layout,
    /// Verbosity of the host's log file.
    pub log_level: LogLevel,
    /// The host's log file.
    #[schemars(length(min = 1))]
    pub log_file: String,
    /// Files or directories marking the project root.
    #[schemars(inner(length(min = 1)), extend("x-expects" = "a list of strings"))]
    pub root_markers: Vec<String>,
    /// Whether progress messages are echoed while loops run.
    pub progress: bool,
    /// Whether loops a host left unfinished resume when Neovim starts.
    pub resume: bool,
    /// Where `:LooprInstall` downloads release assets from (`<install_url>/v<version>/`); nil
    /// means `$LOOPR_INSTALL_URL` when set, else Loopr's GitHub releases.
    #[schemars(length(min = 1))]
    pub install_url: Option<String>,
}

impl Default for EditorOptions {
    fn default() -> EditorOptions {
        EditorOptions {
            bin: None,
            layout: Layout::default(),
            log_level: LogLevel::default(),
            log_file: format!("{STDPATH_PREFIX}log}}/loopr.log"),
            root_markers: vec![".git".to_owned()],
            progress: true,
            resume: true,
            install_url: None,
        }
    }
}
