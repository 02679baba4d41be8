//! Tests of the sandbox settings and of how a refusal is recognised and described.

use super::*;

#[test]
fn secret_looking_variables_are_recognised_and_ordinary_ones_are_not() {
    for secret in [
        "ANTHROPIC_API_KEY",
        "OPENAI_API_KEY",
        "GITHUB_TOKEN",
        "AWS_SECRET_ACCESS_KEY",
        "DB_PASSWORD",
        "MYSQL_PWD_PASSWORD",
        "npm_token",
        "CLIENT_SECRET",
    ] {
        assert!(looks_secret(secret), "{secret}");
    }
    for plain in ["PATH", "HOME", "CARGO_HOME", "LANG", "KEYMAP", "TERM"] {
        assert!(!looks_secret(plain), "{plain}");
    }
}

#[test]
fn writable_paths_must_be_absolute() {
    let settings = SandboxSettings {
        writable: vec!["relative/dir".to_owned()],
        ..SandboxSettings::default()
    };
    let err = settings.writable_paths().expect_err("relative");
    assert!(err.contains("not an absolute path"), "{err}");
}

#[test]
fn a_writable_path_holding_the_home_directory_is_refused() {
    let home = std::env::var("HOME").expect("HOME");
    let parent = Path::new(&home)
        .parent()
        .expect("a home below /")
        .display()
        .to_string();
    for path in [home.clone(), format!("{home}/"), parent, "/".to_owned()] {
        let settings = SandboxSettings {
            writable: vec![path.clone()],
            ..SandboxSettings::default()
        };
        let refused = settings.writable_paths().expect_err(&path);
        assert!(
            refused.contains("holds your home directory") && refused.contains("~/.cargo"),
            "{path}: {refused}"
        );
    }
    let cache = SandboxSettings {
        writable: vec!["~/.cargo".to_owned()],
        ..SandboxSettings::default()
    };
    assert_eq!(
        cache.writable_paths(),
        Ok(vec![Path::new(&home).join(".cargo")])
    );
}

#[test]
#[cfg(linux_apis)]
fn an_unavailable_explicit_mechanism_names_how_to_get_one() {
    if bubblewrap::available().is_ok() {
        return;
    }
    let err = Sandbox::new(&SandboxSettings {
        mode: SandboxMode::Bubblewrap,
        ..SandboxSettings::default()
    })
    .expect_err("no bwrap");
    assert!(err.contains("apt install bubblewrap"), "{err}");
}

fn sandbox_with(mechanism: Mechanism) -> Sandbox {
    Sandbox {
        mechanism,
        network: false,
        allow_git: false,
        ..Sandbox::unconfined("test")
    }
}

fn failed_with(stderr: &str) -> CommandOutput {
    CommandOutput {
        exit_code: Some(1),
        status: "exit status 1".to_owned(),
        stdout: String::new(),
        stderr: stderr.to_owned(),
    }
}

#[test]
fn permission_denied_is_a_refusal_only_where_landlock_confines() {
    let denied = failed_with("rm: cannot remove '/home/you/notes': Permission denied\n");
    let landlock = sandbox_with(Mechanism::Landlock { abi: 7 });
    let refusal = landlock
        .explain_refusal(&denied)
        .expect("a Landlock refusal");
    assert!(
        refusal.contains("the sandbox refused writing outside the project root"),
        "{refusal}"
    );
    // Under bubblewrap a refused write says "Read-only file system"; EACCES is the file's own
    // permissions, not the sandbox.
    let bubblewrap = sandbox_with(Mechanism::Bubblewrap {
        bwrap: PathBuf::from("/usr/bin/bwrap"),
    });
    assert_eq!(bubblewrap.explain_refusal(&denied), None);
    assert_eq!(Sandbox::unconfined("test").explain_refusal(&denied), None);
    let read_only = failed_with("touch: cannot touch '.git/x': Read-only file system\n");
    for sandbox in [&landlock, &bubblewrap] {
        assert!(sandbox.explain_refusal(&read_only).is_some());
    }
}

#[test]
fn landlock_is_described_with_its_abi_and_guarantees() {
    let described = sandbox_with(Mechanism::Landlock { abi: 7 }).describe();
    assert_eq!(
        described,
        "Landlock ABI 7 + namespaces: files read-only but the project (not .git), a private \
         /tmp; network off; own PID namespace"
    );
}

/// What a Mac user reads where a Linux user is told which sandbox confines commands
/// (`loopr sandbox`, `:checkhealth loopr`, every command's approval request): no sandbox, asked
/// every time, and no Linux package to install.
#[test]
fn without_linux_there_is_no_sandbox_every_command_is_asked_and_nothing_to_install() {
    let sandbox = sandbox_with(no_sandbox_on("macos"));
    assert!(!sandbox.is_confined(), "never approved without asking");
    let described = sandbox.describe();
    assert_eq!(
        described,
        "none: Loopr has no sandbox for macOS yet (bubblewrap and Landlock, the ones it uses, \
         are Linux's); commands run with your full permissions and are always asked about; \
         there is nothing to install for it: read each command before you approve it"
    );
    assert_eq!(
        crate::tools::unsandboxed_note(&sandbox),
        format!("\nUNSANDBOXED: {described}")
    );
    for linux_only in ["apt", "dnf", "install bubblewrap", "kernel"] {
        assert!(!described.contains(linux_only), "{linux_only}: {described}");
    }
}

#[test]
fn without_linux_turning_the_sandbox_off_does_not_promise_that_auto_confines() {
    assert_eq!(
        sandbox_with(sandbox_off(false)).describe(),
        "none: the sandbox is off (sandbox.mode = \"off\"); commands run with your full \
         permissions and are always asked about; Loopr has no sandbox for this OS yet, so \
         \"auto\" would not confine them either: read each command before you approve it"
    );
    assert!(
        sandbox_with(sandbox_off(true))
            .describe()
            .ends_with("set sandbox.mode = \"auto\" to confine them")
    );
}

#[test]
fn without_linux_an_explicit_linux_sandbox_is_refused_with_what_to_set_instead() {
    let refused = explicit_mode_without_linux(SandboxMode::Landlock, "macos");
    assert_eq!(
        refused,
        "sandbox.mode = \"landlock\", but that sandbox is Linux's and this is macOS; use \
         sandbox.mode = \"auto\" or \"off\" (commands then run unsandboxed and are always \
         asked about)"
    );
    assert!(
        explicit_mode_without_linux(SandboxMode::Bubblewrap, "freebsd").contains(
            "sandbox.mode = \"bubblewrap\", but that sandbox is Linux's and this is FreeBSD"
        )
    );
}

/// `loopr sandbox-exec` prints this as "Loopr: the sandbox could not be set up: ..." and
/// exits with `SETUP_FAILED` elsewhere than on Linux.
#[test]
fn without_linux_sandbox_exec_refuses_and_says_nothing_ran() {
    assert_eq!(
        exec_request::refused_without_linux("macos").to_string(),
        "loopr sandbox-exec: it confines commands with Landlock and namespaces, which only \
         Linux has, and this is macOS; nothing was run"
    );
}
