//! The codec: MessagePack maps with named fields, or JSON on request.

use serde::Serialize;
use serde::de::{Deserialize, DeserializeOwned};

use super::ProtocolError;

/// The payload encoding: MessagePack maps with named fields, or JSON when the request says
/// `Content-Type: application/json`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Encoding {
    #[default]
    MsgPack,
    Json,
}

impl Encoding {
    pub const JSON_CONTENT_TYPE: &'static str = "application/json";

    /// The encoding a `Content-Type` header value selects (parameters such as
    /// `; charset=utf-8` are ignored).
    pub fn from_content_type(content_type: Option<&str>) -> Self {
        let media_type = content_type.map(|v| v.split(';').next().unwrap_or_default().trim());
        match media_type {
            Some(v) if v.eq_ignore_ascii_case(Self::JSON_CONTENT_TYPE) => Encoding::Json,
            _ => Encoding::MsgPack,
        }
    }
}

/// Encodes a message (MessagePack with named fields, so fields can be added later).
pub fn encode<T: Serialize>(encoding: Encoding, message: &T) -> Result<Vec<u8>, ProtocolError> {
    match encoding {
        Encoding::MsgPack => {
            rmp_serde::to_vec_named(message).map_err(|e| ProtocolError::Encode { detail: e.to_string() })
        }
        Encoding::Json => serde_json::to_vec(message).map_err(|e| ProtocolError::Encode { detail: e.to_string() }),
    }
}

/// Decodes a message; unknown fields are ignored.
pub fn decode<T: DeserializeOwned>(encoding: Encoding, payload: &[u8], what: &'static str) -> Result<T, ProtocolError> {
    match encoding {
        Encoding::MsgPack => {
            rmp_serde::from_slice(payload).map_err(|e| ProtocolError::Decode { what, detail: e.to_string() })
        }
        Encoding::Json => {
            serde_json::from_slice(payload).map_err(|e| ProtocolError::Decode { what, detail: e.to_string() })
        }
    }
}

/// Decodes a message that borrows from `payload`.
pub fn decode_borrowed<'a, T: Deserialize<'a>>(
    encoding: Encoding,
    payload: &'a [u8],
    what: &'static str,
) -> Result<T, ProtocolError> {
    match encoding {
        Encoding::MsgPack => {
            rmp_serde::from_slice(payload).map_err(|e| ProtocolError::Decode { what, detail: e.to_string() })
        }
        Encoding::Json => {
            serde_json::from_slice(payload).map_err(|e| ProtocolError::Decode { what, detail: e.to_string() })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::{JobSpec, LossReport, Role, WorkerAssignment, WorkerSpec};

    #[test]
    fn msgpack_is_named_and_tolerates_unknown_fields() {
        let report = LossReport::new("j", 3, 0.5, 1.0, 2);
        let bytes = encode(Encoding::MsgPack, &report).unwrap();
        let back: LossReport = decode_borrowed(Encoding::MsgPack, &bytes, "loss report").unwrap();
        assert_eq!(back, report);
        // A newer sender with an extra field.
        #[derive(Serialize)]
        struct Newer<'a> {
            job: &'a str,
            iter: u64,
            loss: f64,
            iter_seconds: f64,
            workers: u32,
            gpu_temp: f64,
        }
        let newer = rmp_serde::to_vec_named(&Newer {
            job: "j",
            iter: 1,
            loss: 1.0,
            iter_seconds: 0.1,
            workers: 1,
            gpu_temp: 70.0,
        })
        .unwrap();
        assert!(decode_borrowed::<LossReport>(Encoding::MsgPack, &newer, "loss report").is_ok());
        let json = br#"{"job":"j","iter":1,"loss":1.0,"iter_seconds":0.1,"workers":1,"extra":[1,2]}"#;
        assert!(decode_borrowed::<LossReport>(Encoding::Json, json, "loss report").is_ok());
    }

    #[test]
    fn defaults_apply() {
        let spec: JobSpec = decode(Encoding::Json, br#"{"job":"j"}"#, "spec").unwrap();
        assert_eq!(spec, JobSpec::new("j"));
        let w: WorkerSpec = decode(Encoding::Json, br#"{"worker":"w"}"#, "spec").unwrap();
        assert_eq!(w.slots, 1);
        let a: WorkerAssignment = decode(Encoding::Json, br#"{"worker":"w","epoch":3}"#, "a").unwrap();
        assert_eq!(a.role, Role::Worker);
        assert_eq!(a.job, None);
    }

    #[test]
    fn a_decode_error_says_which_field() {
        let err =
            decode_borrowed::<LossReport>(Encoding::Json, br#"{"job":"j","loss":1.0}"#, "loss report").unwrap_err();
        assert!(err.to_string().contains("missing field `iter`"), "{err}");
        let bytes = rmp_serde::to_vec_named(&serde_json::json!({"job": "j", "iter": "three"})).unwrap();
        let err = decode_borrowed::<LossReport>(Encoding::MsgPack, &bytes, "loss report").unwrap_err();
        assert!(err.to_string().starts_with("cannot decode loss report: "), "{err}");
    }

    #[test]
    fn content_type_selects_json() {
        assert_eq!(Encoding::from_content_type(Some("application/json")), Encoding::Json);
        assert_eq!(Encoding::from_content_type(Some("Application/JSON ")), Encoding::Json);
        assert_eq!(Encoding::from_content_type(Some("application/json; charset=utf-8")), Encoding::Json);
        assert_eq!(Encoding::from_content_type(None), Encoding::MsgPack);
        assert_eq!(Encoding::from_content_type(Some("application/msgpack")), Encoding::MsgPack);
    }
}
