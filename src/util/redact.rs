//! Redaction of secrets in what nanolet prints: logs, errors, `/configz`, `/manifests/errors`.

/// The placeholder for secret values in `Debug`, logs and `/configz`.
pub const REDACTED: &str = "<redacted>";

/// `url` as logs, errors and `/manifests/errors` show it: the userinfo
/// (`user:password@`), every query value and the fragment replaced by
/// `<redacted>`; query parameter names stay (`?token=<redacted>&page=<redacted>`).
///
/// Every value, not only those whose names look secret: presigned and signed URLs carry
/// credentials under many names (`token`, `access_token`, `key`, `sig`, `signature`,
/// `X-Amz-Signature`, `X-Amz-Credential`, `X-Amz-Security-Token`, `X-Goog-Signature`, Azure's
/// `sig`/`se`/`sv`, ...) and a list of names would miss the next service's; a name without a
/// value (`?s3cret`) is redacted whole.
pub fn redact_url(url: &str) -> String {
    let url = redact_userinfo(url);
    let (rest, fragment) = match url.split_once('#') {
        Some((rest, _)) => (rest, true),
        None => (url.as_str(), false),
    };
    let mut out = match rest.split_once('?') {
        Some((base, query)) => {
            let items: Vec<String> = query
                .split('&')
                .map(|item| match item.split_once('=') {
                    Some((name, _)) => format!("{name}={REDACTED}"),
                    None if item.is_empty() => String::new(),
                    None => REDACTED.to_string(),
                })
                .collect();
            format!("{base}?{}", items.join("&"))
        }
        None => rest.to_string(),
    };
    if fragment {
        out.push('#');
        out.push_str(REDACTED);
    }
    out
}

/// `url` with its userinfo (`user:password@`) replaced by `<redacted>`.
fn redact_userinfo(url: &str) -> String {
    let Some(scheme_end) = url.find("://") else {
        return url.to_string();
    };
    let auth_start = scheme_end + 3;
    let rest = &url[auth_start..];
    let auth_len = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    match rest[..auth_len].rfind('@') {
        Some(at) => format!("{}{REDACTED}{}", &url[..auth_start], &rest[at..]),
        None => url.to_string(),
    }
}
