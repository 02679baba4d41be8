//! The ACP protocol version Loopr speaks, and the version an agent spoke when the SDK
//! refused its answer.

use agent_client_protocol::schema::ProtocolVersion;

/// The ACP protocol version Loopr speaks (the SDK's stable version).
pub const LOOPR_PROTOCOL_VERSION: ProtocolVersion = ProtocolVersion::V1;

/// The version an agent answered that the SDK refused, from the SDK's error data
/// (`unsupported ACP protocol version 7; ...`, `... but peer negotiated 2; ...`).
pub(super) fn version_refused(data: &str) -> Option<String> {
    ["unsupported ACP protocol version ", "but peer negotiated "]
        .iter()
        .find_map(|lead| {
            let after = &data[data.find(lead)? + lead.len()..];
            let digits: String = after.chars().take_while(char::is_ascii_digit).collect();
            Some(if digits.is_empty() {
                "unknown".to_owned()
            } else {
                digits
            })
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_refused_version_is_read_from_the_sdk_words() {
        assert_eq!(
            version_refused(
                "unsupported ACP protocol version 7; this endpoint only supports ACP protocol version 1"
            ),
            Some("7".to_owned())
        );
        assert_eq!(
            version_refused(
                "required ACP protocol version 1 but peer negotiated 2; use a matching"
            ),
            Some("2".to_owned())
        );
        assert_eq!(version_refused("method not found"), None);
    }
}
