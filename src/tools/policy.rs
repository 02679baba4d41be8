//! What tools may never touch, whatever the user approves: secret files are never read or
//! written, and denied commands never run.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use globset::{GlobBuilder, GlobMatcher, GlobSet, GlobSetBuilder};
use regex::Regex;

use super::sandbox::Sandbox;

/// Credential files by the names their tools give them. SSH keys are named in full
/// (`id_rsa*`, not `id_*`) so that ordinary files such as `id_map.go` stay readable.
pub const DEFAULT_SECRET_PATTERNS: [&str; 13] = [
    ".env*",
    ".git-credentials",
    ".netrc",
    ".npmrc",
    ".pypirc",
    ".aws/credentials",
    "*.pem",
    "*.key",
    "credentials.json",
    "id_rsa*",
    "id_ed25519*",
    "id_ecdsa*",
    "id_dsa*",
];

/// `rm` aimed at the root or the home directory, `git push`, and `sudo`.
pub const DEFAULT_DENIED_COMMANDS: [&str; 3] = [
    r"\brm\s+(?:-\S+\s+)*(?:/\.?\*?|~/?\*?|\$\{?HOME\}?/?\*?)(?:[\s;&|)]|$)",
    r"\bgit\s+(?:-\S+(?:\s+[^-\s]\S*)?\s+)*push\b",
    r"\bsudo\b",
];

#[derive(Clone, Debug)]
pub struct ToolPolicy {
    secret_patterns: Vec<String>,
    /// Patterns without a `/`, matched against the file name; their indexes into
    /// `secret_patterns`.
    secret_names: GlobSet,
    secret_name_indexes: Vec<usize>,
    /// Patterns with a `/` (`.aws/credentials`), matched against as many trailing components
    /// of the path as they have.
    secret_paths: Vec<SecretPath>,
    denied_commands: Vec<Regex>,
    pub command_timeout: Duration,
    /// Where commands run.
    pub sandbox: Arc<Sandbox>,
}

impl Default for ToolPolicy {
    fn default() -> ToolPolicy {
        let secrets: Vec<String> = DEFAULT_SECRET_PATTERNS
            .iter()
            .map(|p| (*p).to_owned())
            .collect();
        let denied: Vec<String> = DEFAULT_DENIED_COMMANDS
            .iter()
            .map(|p| (*p).to_owned())
            .collect();
        // The defaults are constants known to compile.
        ToolPolicy::new(&secrets, &denied, Duration::from_secs(120)).unwrap_or_else(|_| {
            ToolPolicy {
                secret_patterns: Vec::new(),
                secret_names: GlobSet::empty(),
                secret_name_indexes: Vec::new(),
                secret_paths: Vec::new(),
                denied_commands: Vec::new(),
                command_timeout: Duration::from_secs(120),
                sandbox: Arc::new(Sandbox::unconfined("no sandbox configured")),
            }
        })
    }
}

impl ToolPolicy {
    /// `secret_patterns` are case-insensitive globs matched against file names (`.env*`), or,
    /// when they contain a `/`, against the end of the path (`.aws/credentials`);
    /// `denied_commands` are regular expressions matched against the command with its
    /// whitespace collapsed.
    pub fn new(
        secret_patterns: &[String],
        denied_commands: &[String],
        command_timeout: Duration,
    ) -> Result<ToolPolicy, String> {
        let mut names = GlobSetBuilder::new();
        let mut secret_name_indexes = Vec::new();
        let mut secret_paths = Vec::new();
        for (index, pattern) in secret_patterns.iter().enumerate() {
            let trimmed = pattern.trim_matches('/');
            // Case-insensitive: `.ENV` or `ID_RSA` on a case-insensitive file system is the
            // same file, and a renamed copy is as secret as the original.
            let glob = GlobBuilder::new(trimmed)
                .case_insensitive(true)
                .literal_separator(true)
                .build()
                .map_err(|err| format!("secret pattern {pattern:?}: {err}"))?;
            if trimmed.contains('/') {
                secret_paths.push(SecretPath {
                    components: trimmed.split('/').filter(|part| !part.is_empty()).count(),
                    matcher: glob.compile_matcher(),
                    index,
                });
            } else {
                names.add(glob);
                secret_name_indexes.push(index);
            }
        }
        let secret_names = names
            .build()
            .map_err(|err| format!("secret patterns: {err}"))?;
        let denied_commands = denied_commands
            .iter()
            .map(|pattern| {
                Regex::new(pattern)
                    .map_err(|err| format!("denied command pattern {pattern:?}: {err}"))
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(ToolPolicy {
            secret_patterns: secret_patterns.to_vec(),
            secret_names,
            secret_name_indexes,
            secret_paths,
            denied_commands,
            command_timeout,
            sandbox: Arc::new(Sandbox::unconfined("no sandbox configured")),
        })
    }

    /// The policy with commands run in `sandbox`.
    pub fn with_sandbox(self, sandbox: Sandbox) -> ToolPolicy {
        ToolPolicy {
            sandbox: Arc::new(sandbox),
            ..self
        }
    }

    /// The secret pattern `path` matches (by its file name, or by its end for patterns with
    /// a `/`), if any.
    pub fn secret_pattern(&self, path: &Path) -> Option<&str> {
        let name = path.file_name()?;
        let by_name = self
            .secret_names
            .matches(Path::new(name))
            .first()
            .and_then(|matched| self.secret_name_indexes.get(*matched).copied());
        let by_path = || {
            let components: Vec<_> = path
                .components()
                .filter_map(|component| match component {
                    std::path::Component::Normal(part) => Some(part),
                    _ => None,
                })
                .collect();
            self.secret_paths.iter().find_map(|secret| {
                let start = components.len().checked_sub(secret.components)?;
                let tail: std::path::PathBuf = components[start..].iter().collect();
                secret.matcher.is_match(&tail).then_some(secret.index)
            })
        };
        by_name
            .or_else(by_path)
            .and_then(|index| self.secret_patterns.get(index))
            .map(String::as_str)
    }

    /// The deny pattern `command` matches, if any.
    pub fn denied_by(&self, command: &str) -> Option<&str> {
        // Quotes and backslashes dropped, `"git" push` and `s\udo` read as what the shell
        // runs. Best effort: a shell can be talked into more than patterns foresee, which is
        // why commands are also approved.
        let unquoted: String = command
            .chars()
            .filter(|c| !matches!(c, '"' | '\'' | '\\'))
            .collect();
        let collapsed = unquoted.split_whitespace().collect::<Vec<_>>().join(" ");
        self.denied_commands
            .iter()
            .find(|pattern| pattern.is_match(&collapsed))
            .map(Regex::as_str)
    }
}

#[derive(Clone, Debug)]
struct SecretPath {
    components: usize,
    matcher: GlobMatcher,
    index: usize,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secret_files_match_by_name_anywhere() {
        let policy = ToolPolicy::default();
        for secret in [
            ".env",
            ".env.local",
            ".ENV.Production",
            "config/.env.production",
            "certs/server.pem",
            "certs/SERVER.PEM",
            "tls/private.key",
            "home/id_rsa",
            "home/ID_RSA",
            "id_ed25519.pub",
            ".ssh/id_ecdsa",
            "id_dsa",
            ".git-credentials",
            "deploy/.netrc",
            ".npmrc",
            ".pypirc",
            ".aws/credentials",
            "/home/someone/.AWS/Credentials",
            "gcp/credentials.json",
            "Credentials.JSON",
        ] {
            assert!(
                policy.secret_pattern(Path::new(secret)).is_some(),
                "{secret}"
            );
        }
        for plain in [
            "src/env.rs",
            "environment.md",
            "README.md",
            "grid_id.rs",
            "id_map.go",
            "src/id_generator.rs",
            "credentials",
            "aws/credentials.md",
            "docs/credentials.md",
            "keys.rs",
            "monkey",
        ] {
            assert_eq!(policy.secret_pattern(Path::new(plain)), None, "{plain}");
        }
    }

    #[test]
    fn the_default_deny_list_catches_its_commands_and_their_variants() {
        let policy = ToolPolicy::default();
        for denied in [
            "rm -rf /",
            "rm -fr /*",
            "rm  -r -f  ~",
            "cd /tmp && rm -rf $HOME",
            "git push origin main",
            "git -C . push --force",
            "sudo apt-get install x",
            "echo ok; sudo  reboot",
            "\"git\" push",
            "g''it push",
            "s\\udo true",
            "rm -rf /.",
            "rm -rf \"$HOME\"",
            "rm -rf ~/*",
        ] {
            assert!(policy.denied_by(denied).is_some(), "{denied}");
        }
        for allowed in [
            "rm -rf target",
            "rm -rf ./build/",
            "git status",
            "git pushd-notes",
            "cargo test",
            "echo pseudo",
        ] {
            assert_eq!(policy.denied_by(allowed), None, "{allowed}");
        }
    }

    #[test]
    fn bad_patterns_are_reported_by_name() {
        let err =
            ToolPolicy::new(&["[".to_owned()], &[], Duration::from_secs(1)).expect_err("bad glob");
        assert!(err.contains("secret pattern \"[\""), "{err}");
        let err =
            ToolPolicy::new(&[], &["(".to_owned()], Duration::from_secs(1)).expect_err("bad regex");
        assert!(err.contains("denied command pattern \"(\""), "{err}");
    }
}
