//! The environment a command gets: an allow-list of the host's variables, and never one that
//! looks like a secret, even when the user allowed it by name.

use std::ffi::OsString;

/// Variables commands need to find their tools and speak the user's language.
const ALLOWED: [&str; 24] = [
    "PATH",
    "HOME",
    "USER",
    "LOGNAME",
    "SHELL",
    "LANG",
    "LANGUAGE",
    "TERM",
    "TZ",
    "TMPDIR",
    "CARGO_HOME",
    "RUSTUP_HOME",
    "RUSTUP_TOOLCHAIN",
    "GOPATH",
    "GOMODCACHE",
    "GOCACHE",
    "GOROOT",
    "JAVA_HOME",
    "NVM_DIR",
    "PNPM_HOME",
    "NPM_CONFIG_CACHE",
    "VIRTUAL_ENV",
    "PYTHONPATH",
    "PYENV_ROOT",
];

/// Whether a variable's name says it holds a secret (`*_KEY`, `*_TOKEN`, `*_SECRET`,
/// `*PASSWORD*`, and the like), whatever its case.
pub fn looks_secret(name: &str) -> bool {
    let name = name.to_ascii_uppercase();
    [
        "_KEY",
        "_TOKEN",
        "_SECRET",
        "_SECRETS",
        "_CREDENTIALS",
        "_PAT",
    ]
    .iter()
    .any(|suffix| name.ends_with(suffix))
        || ["PASSWORD", "PASSWD", "API_KEY", "SECRET_", "TOKEN_"]
            .iter()
            .any(|part| name.contains(part))
        || name == "TOKEN"
        || name == "SECRET"
}

/// Whether setting a variable changes which programs a command runs or what they load
/// (`PATH`, the dynamic loader's `LD_*` and `DYLD_*`, the startup files shells read, `IFS`),
/// so that the command approved is no longer what runs.
pub fn changes_what_runs(name: &str) -> bool {
    let name = name.to_ascii_uppercase();
    ["LD_", "DYLD_"]
        .iter()
        .any(|prefix| name.starts_with(prefix))
        || [
            "PATH",
            "BASH_ENV",
            "ENV",
            "IFS",
            "SHELLOPTS",
            "BASHOPTS",
            "PS4",
            "PROMPT_COMMAND",
            "CDPATH",
        ]
        .contains(&name.as_str())
}

/// The host's variables a command may see: the allow-list, `LC_*`, and `extra`, minus
/// anything that looks like a secret.
pub fn command_environment(extra: &[String]) -> Vec<(OsString, OsString)> {
    std::env::vars_os()
        .filter(|(name, _)| {
            let Some(name) = name.to_str() else {
                return false;
            };
            let allowed = ALLOWED.contains(&name)
                || name.starts_with("LC_")
                || extra.iter().any(|wanted| wanted == name);
            allowed && !looks_secret(name)
        })
        .collect()
}
