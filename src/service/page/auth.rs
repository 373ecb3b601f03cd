//! The optional bearer token (`[http] token`): when it is set, nothing but `/healthz` is served
//! without it (the page, its JSON, job names, `/metrics`, `/readyz`). A client sends it as
//! `Authorization: Bearer <token>`; a browser opening the page sends it once as `?token=`,
//! which the page then sends as that header. Compared in constant time.

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use subtle::ConstantTimeEq;

/// The token, if one is set.
#[derive(Clone, Default)]
pub struct Token(pub Option<Arc<str>>);

impl Token {
    /// Whether `request` carries the token (always, when none is set).
    fn admits(&self, request: &Request) -> bool {
        let Some(token) = &self.0 else { return true };
        let matches = |given: &str| bool::from(given.as_bytes().ct_eq(token.as_bytes()));
        let bearer = request
            .headers()
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
            .is_some_and(|given| matches(given.trim()));
        let query = || {
            let query = request.uri().query().unwrap_or("");
            url::form_urlencoded::parse(query.as_bytes()).any(|(k, v)| k == "token" && matches(&v))
        };
        bearer || query()
    }
}

/// Middleware: answers 401 to a request without the token (but `/healthz`).
pub async fn require_token(State(token): State<Token>, request: Request, next: Next) -> Response {
    if request.uri().path() == "/healthz" || token.admits(&request) {
        return next.run(request).await;
    }
    let headers = [
        (header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer")),
        (header::CONTENT_TYPE, HeaderValue::from_static("application/json")),
    ];
    let body = r#"{"error":"this scheduler asks for its token ([http] token)"}"#;
    (StatusCode::UNAUTHORIZED, headers, body).into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(uri: &str, authorization: Option<&str>) -> Request {
        let mut builder = axum::http::Request::builder().uri(uri);
        if let Some(a) = authorization {
            builder = builder.header(header::AUTHORIZATION, a);
        }
        builder.body(axum::body::Body::empty()).unwrap()
    }

    #[test]
    fn only_the_exact_token_admits_by_header_or_query() {
        let token = Token(Some(Arc::from("s3cr+t/=")));
        assert!(token.admits(&request("/api/v1/overview", Some("Bearer s3cr+t/="))));
        assert!(token.admits(&request("/?token=s3cr%2Bt%2F%3D", None)), "percent-encoded in the query");
        assert!(token.admits(&request("/?a=1&token=s3cr%2Bt%2F%3D", None)));
        for (uri, auth) in [
            ("/", None),
            ("/", Some("Bearer")),
            ("/", Some("Bearer ")),
            ("/", Some("bearer s3cr+t/=")),
            ("/", Some("Basic s3cr+t/=")),
            ("/", Some("Bearer s3cr+t/")),
            ("/", Some("Bearer s3cr+t/==")),
            ("/?token=", None),
            ("/?token=s3cr+t/=", None), // `+` in a query is a space
            ("/?tokens=s3cr%2Bt%2F%3D", None),
        ] {
            assert!(!token.admits(&request(uri, auth)), "{uri} {auth:?}");
        }
        // No token set: everything is admitted.
        assert!(Token(None).admits(&request("/", None)));
    }
}
