//! When to retry a failed request and how long to wait, following the official SDKs:
//! connection errors and 408, 409, 429 and 5xx are retried; the server's `retry-after-ms` or
//! `retry-after` is honoured when it asks for at most 60 s; otherwise exponential backoff
//! with jitter.

use std::time::{Duration, SystemTime};

use reqwest::header::HeaderMap;

const INITIAL_DELAY: Duration = Duration::from_millis(500);
const MAX_BACKOFF: Duration = Duration::from_secs(8);
const MAX_SERVER_DELAY: Duration = Duration::from_secs(60);

/// Whether a response with this status is worth retrying. `x-should-retry` overrides the
/// status; a spending limit is never retried because waiting will not lift it.
pub fn is_retryable_status(status: u16, headers: &HeaderMap, error_code: Option<&str>) -> bool {
    match header_str(headers, "x-should-retry") {
        Some("true") => return true,
        Some("false") => return false,
        _ => {}
    }
    if error_code == Some("enforced_spend_limit_reached") {
        return false;
    }
    matches!(status, 408 | 409 | 429) || status >= 500
}

/// The delay the server asked for, if it is positive and at most 60 s.
pub fn server_requested_delay(headers: &HeaderMap, now: SystemTime) -> Option<Duration> {
    let requested = if let Some(millis) = header_str(headers, "retry-after-ms") {
        millis
            .trim()
            .parse::<f64>()
            .ok()
            .filter(|ms| ms.is_finite() && *ms > 0.0)
            .map(|ms| Duration::from_secs_f64(ms / 1000.0))
    } else if let Some(value) = header_str(headers, "retry-after") {
        parse_retry_after(value.trim(), now)
    } else {
        None
    }?;
    (requested > Duration::ZERO && requested <= MAX_SERVER_DELAY).then_some(requested)
}

fn parse_retry_after(value: &str, now: SystemTime) -> Option<Duration> {
    if let Ok(seconds) = value.parse::<f64>() {
        return (seconds.is_finite() && seconds > 0.0).then(|| Duration::from_secs_f64(seconds));
    }
    let date = httpdate::parse_http_date(value).ok()?;
    date.duration_since(now).ok()
}

/// `min(0.5 s × 2^retries, 8 s)`, reduced by up to a quarter by `jitter` in `[0, 1)`.
pub fn backoff_delay(retries_so_far: u32, jitter: f64) -> Duration {
    let exponential = INITIAL_DELAY.saturating_mul(2u32.saturating_pow(retries_so_far.min(16)));
    let capped = exponential.min(MAX_BACKOFF);
    capped.mul_f64(1.0 - 0.25 * jitter.clamp(0.0, 1.0))
}

fn header_str<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers.get(name).and_then(|value| value.to_str().ok())
}

#[cfg(test)]
mod tests {
    use super::*;
    use reqwest::header::{HeaderName, HeaderValue};

    fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.insert(
                HeaderName::from_bytes(name.as_bytes()).expect("name"),
                HeaderValue::from_str(value).expect("value"),
            );
        }
        map
    }

    #[test]
    fn retryable_statuses_match_the_sdks() {
        let none = HeaderMap::new();
        for status in [408, 409, 429, 500, 502, 503, 504, 529] {
            assert!(is_retryable_status(status, &none, None), "{status}");
        }
        for status in [400, 401, 402, 403, 404, 413, 422] {
            assert!(!is_retryable_status(status, &none, None), "{status}");
        }
    }

    #[test]
    fn should_retry_header_and_spend_limit_override_the_status() {
        assert!(!is_retryable_status(
            503,
            &headers(&[("x-should-retry", "false")]),
            None
        ));
        assert!(is_retryable_status(
            400,
            &headers(&[("x-should-retry", "true")]),
            None
        ));
        assert!(!is_retryable_status(
            429,
            &HeaderMap::new(),
            Some("enforced_spend_limit_reached")
        ));
    }

    #[test]
    fn server_delay_prefers_milliseconds_and_respects_the_sixty_second_cap() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000);
        let check = |pairs: &[(&str, &str)]| server_requested_delay(&headers(pairs), now);
        assert_eq!(
            check(&[("retry-after-ms", "250"), ("retry-after", "9")]),
            Some(Duration::from_millis(250))
        );
        assert_eq!(check(&[("retry-after", "2")]), Some(Duration::from_secs(2)));
        assert_eq!(check(&[("retry-after", "61")]), None);
        assert_eq!(check(&[("retry-after", "0")]), None);
        assert_eq!(check(&[("retry-after", "soon")]), None);
        let in_ten_seconds = httpdate::fmt_http_date(now + Duration::from_secs(10));
        assert_eq!(
            check(&[("retry-after", &in_ten_seconds)]),
            Some(Duration::from_secs(10))
        );
        assert_eq!(check(&[]), None);
    }

    #[test]
    fn backoff_doubles_caps_at_eight_seconds_and_jitters_down_by_a_quarter() {
        assert_eq!(backoff_delay(0, 0.0), Duration::from_millis(500));
        assert_eq!(backoff_delay(1, 0.0), Duration::from_secs(1));
        assert_eq!(backoff_delay(5, 0.0), Duration::from_secs(8));
        assert_eq!(backoff_delay(40, 0.0), Duration::from_secs(8));
        assert_eq!(backoff_delay(0, 1.0), Duration::from_millis(375));
    }
}
