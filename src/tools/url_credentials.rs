//! Credentials in URLs, taken out of everything a tool hands the model. A remote in
//! `.git/config`, a clone command in a README or a command's output may carry a token
//! (`https://ghp_…@github.com/…`, `https://user:password@host/…`); read by a planning tool
//! without any approval, it would otherwise go to the model provider and into the journal.

use std::borrow::Cow;
use std::sync::LazyLock;

use regex::{Captures, Regex};

/// What stands where the credentials were.
pub const REDACTED: &str = "[REDACTED]";

/// `scheme://userinfo@`: the userinfo is everything up to the `@` that ends the authority
/// (no `/`, `?`, `#`, blank or quote between).
static USERINFO: LazyLock<Option<Regex>> =
    LazyLock::new(|| Regex::new(r#"(?i)\b([a-z][a-z0-9+.\-]*)://([^/?#@\s"'<>`\\]+)@"#).ok());

/// `text` with the credentials of every URL in it replaced by `[REDACTED]`: the whole
/// userinfo of an HTTP(S) URL (a token is often the user name), the password of any other
/// (`ssh://git@host` keeps its user, which is no secret).
pub fn redact_url_credentials(text: &str) -> Cow<'_, str> {
    if !text.contains("://") {
        return Cow::Borrowed(text);
    }
    let Some(pattern) = USERINFO.as_ref() else {
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
            assert_eq!(redact_url_credentials(text), redacted, "{text}");
        }
    }

    #[test]
    fn text_without_credentials_is_left_alone() {
        for text in [
            "see https://example.com/a@b and mail me@example.com",
            "git@github.com:acme/app.git",
            "no urls at all",
        ] {
            assert_eq!(redact_url_credentials(text), text);
        }
    }
}
