//! Credentials in text, taken out of everything a tool hands the model. A remote in
//! `.git/config`, a clone command in a README or a command's output may carry a token
//! (`https://ghp_…@github.com/…`, `https://user:password@host/…`), and CI checkouts write one
//! into `.git/config` as a header (`extraheader = AUTHORIZATION: basic …`); read by a planning
//! tool without any approval, it would otherwise go to the model provider and into the
//! journal.

use std::borrow::Cow;
use std::sync::LazyLock;

use regex::{Captures, Regex};

/// What stands where the credentials were.
pub const REDACTED: &str = "[REDACTED]";

/// `scheme://userinfo@`: the userinfo runs to the last `@` before the authority ends (a `/`,
/// `?`, `#`, blank or quote), so a password holding a raw `@` goes whole.
static USERINFO: LazyLock<Option<Regex>> =
    LazyLock::new(|| Regex::new(r#"(?i)\b([a-z][a-z0-9+.\-]*)://([^/?#\s"'<>`\\]+)@"#).ok());

/// An `Authorization` header's value (`Authorization: Bearer …`, git's
/// `extraheader = AUTHORIZATION: basic …`, `authorization=token …`): what follows the scheme.
static AUTHORIZATION: LazyLock<Option<Regex>> = LazyLock::new(|| {
    Regex::new(
        r#"(?i)(\bauthorization\s*[:=]\s*(?:(?:basic|bearer|token|digest|negotiate)\s+)?)[^\s"'`]{4,}"#,
    )
    .ok()
});

/// `text` with the credentials in it replaced by `[REDACTED]`: the whole userinfo of an
/// HTTP(S) URL (a token is often the user name), the password of any other URL
/// (`ssh://git@host` keeps its user, which is no secret), and an `Authorization` value.
pub fn redact_credentials(text: &str) -> Cow<'_, str> {
    let urls = redact_userinfo(text);
    match redact_authorization(&urls) {
        Cow::Borrowed(_) => urls,
        Cow::Owned(redacted) => Cow::Owned(redacted),
    }
}

/// A URL cut off inside its authority at the end of a text: `scheme://` and whatever of
/// the userinfo or host got in before the cut.
static CUT_AUTHORITY_AT_END: LazyLock<Option<Regex>> =
    LazyLock::new(|| Regex::new(r#"(?i)\b([a-z][a-z0-9+.\-]*://)[^/?#\s"'<>`\\]+$"#).ok());

/// The rest of a userinfo at the start of a text that a cut began inside a URL: up to its
/// `@`, with nothing between that ends an authority.
static CUT_USERINFO_AT_START: LazyLock<Option<Regex>> =
    LazyLock::new(|| Regex::new(r#"^[:/]*[^/?#\s"'<>`\\]*@"#).ok());

/// The kept start of a text cut at its end: a URL the cut went through keeps its scheme and
/// loses what came of its authority, which may be part of a token.
pub fn redact_cut_end(kept: &str) -> Cow<'_, str> {
    match CUT_AUTHORITY_AT_END.as_ref() {
        Some(pattern) if kept.contains("://") => {
            pattern.replace(kept, format!("${{1}}{REDACTED}").as_str())
        }
        _ => Cow::Borrowed(kept),
    }
}

/// The end of an output kept (`cut` when its start was dropped) as it may be shown or handed
/// on: no credential in it, nor what is left of one the cut went through.
pub fn redact_kept_tail(text: String, cut: bool) -> String {
    let text = if cut {
        redact_cut_start(&text).into_owned()
    } else {
        text
    };
    redact_credentials(&text).into_owned()
}

/// The kept end of a text cut at its start: if the cut went through a URL's userinfo, what is
/// left of it up to the `@` goes.
pub fn redact_cut_start(kept: &str) -> Cow<'_, str> {
    match CUT_USERINFO_AT_START.as_ref() {
        Some(pattern) if kept.contains('@') => {
            pattern.replace(kept, format!("{REDACTED}@").as_str())
        }
        _ => Cow::Borrowed(kept),
    }
}

fn redact_userinfo(text: &str) -> Cow<'_, str> {
    let Some(pattern) = USERINFO.as_ref().filter(|_| text.contains("://")) else {
        return Cow::Borrowed(text);
    };
    pattern.replace_all(text, |captures: &Captures<'_>| {
        let scheme = &captures[1];
        let userinfo = &captures[2];
        let kept = if scheme.eq_ignore_ascii_case("http") || scheme.eq_ignore_ascii_case("https") {
            REDACTED.to_owned()
        } else {
            match userinfo.split_once(':') {
                Some((user, _password)) => format!("{user}:{REDACTED}"),
                None => userinfo.to_owned(),
            }
        };
        format!("{scheme}://{kept}@")
    })
}

fn redact_authorization(text: &str) -> Cow<'_, str> {
    let Some(pattern) = AUTHORIZATION.as_ref() else {
        return Cow::Borrowed(text);
    };
    if !text.to_ascii_lowercase().contains("authorization") {
        return Cow::Borrowed(text);
    }
    pattern.replace_all(text, |captures: &Captures<'_>| {
        format!("{}{REDACTED}", &captures[1])
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_and_passwords_in_urls_are_redacted() {
        let cases = [
            (
                "url = https://ghp_abc123@github.com/acme/app.git",
                "url = https://[REDACTED]@github.com/acme/app.git",
            ),
            (
                "git clone https://x-access-token:s3cret@github.com/a/b",
                "git clone https://[REDACTED]@github.com/a/b",
            ),
            (
                "HTTP://user:pa%40ss@host:8080/path?q=1",
                "HTTP://[REDACTED]@host:8080/path?q=1",
            ),
            (
                "postgres://app:hunter2@db.internal:5432/prod",
                "postgres://app:[REDACTED]@db.internal:5432/prod",
            ),
            (
                "ssh://git@github.com/acme/app.git",
                "ssh://git@github.com/acme/app.git",
            ),
            (
                "\"https://a:b@h/1\" and 'ftp://u:p@h/2'",
                "\"https://[REDACTED]@h/1\" and 'ftp://u:[REDACTED]@h/2'",
            ),
        ];
        for (text, redacted) in cases {
            assert_eq!(redact_credentials(text), redacted, "{text}");
        }
    }

    #[test]
    fn a_password_holding_an_at_sign_is_redacted_whole() {
        assert_eq!(
            redact_credentials("https://user:p@ss@host/x and ssh://u:a@b@h/y"),
            "https://[REDACTED]@host/x and ssh://u:[REDACTED]@h/y"
        );
    }

    #[test]
    fn authorization_header_values_are_redacted() {
        let cases = [
            (
                "[http \"https://github.com/\"]\n\textraheader = AUTHORIZATION: basic eC1hY2Nlc3MtdG9rZW46Z2hzX3NlY3JldA==\n",
                "[http \"https://github.com/\"]\n\textraheader = AUTHORIZATION: basic [REDACTED]\n",
            ),
            (
                "curl -H 'Authorization: Bearer eyJhbGciOiJIUzI1NiJ9.e30.abc' x",
                "curl -H 'Authorization: Bearer [REDACTED]' x",
            ),
            (
                "authorization=token ghp_0123456789abcdef",
                "authorization=token [REDACTED]",
            ),
        ];
        for (text, redacted) in cases {
            assert_eq!(redact_credentials(text), redacted, "{text}");
        }
    }

    #[test]
    fn text_without_credentials_is_left_alone() {
        for text in [
            "see https://example.com/a@b and mail me@example.com",
            "git@github.com:acme/app.git",
            "no urls at all",
            "the Authorization header is checked",
        ] {
            assert_eq!(redact_credentials(text), text);
        }
    }
}
