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
