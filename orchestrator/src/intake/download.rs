//! Downloads: redirects followed by hand so every hop's address is checked and recorded, and
//! the size caps enforced per chunk while streaming.

use std::io::Write;
use std::path::Path;
use std::time::Duration;

use futures_util::StreamExt;
use sha2::{Digest, Sha256};

use super::copy::create_copy;
use super::{fetchable, io_err, IntakeError, IntakeLimits};
use crate::urlcheck;

/// What a download brought in.
pub(super) struct Fetched {
    /// Bytes.
    pub(super) size: u64,
    /// sha256 of the bytes, hex.
    pub(super) sha256: String,
    /// Every URL requested, in order.
    pub(super) hops: Vec<String>,
    /// The URL that answered with the bytes.
    pub(super) final_url: String,
}

/// Streams a URL to `dst` with the size caps (download and what is left of the input cap)
/// enforced per chunk; removes the partial file on failure.
pub(super) async fn download(
    url: &reqwest::Url,
    dst: &Path,
    limits: &IntakeLimits,
    budget_left: u64,
) -> Result<Fetched, IntakeError> {
    let shown_url = url.to_string();
    let result = match tokio::time::timeout(
        limits.download_timeout,
        download_inner(url, dst, limits, budget_left),
    )
    .await
    {
        Ok(r) => r,
        Err(_) => Err(IntakeError::Download {
            url: shown_url,
            message: "timed out".into(),
        }),
    };
    if result.is_err() {
        let _ = std::fs::remove_file(dst);
    }
    result
}

/// Follows redirects by hand so that every hop's address is checked (the resolver returns only
/// checked addresses, IP literals are checked here) and recorded.
async fn download_inner(
    url: &reqwest::Url,
    dst: &Path,
    limits: &IntakeLimits,
    budget_left: u64,
) -> Result<Fetched, IntakeError> {
    let client = client(limits).map_err(|e| fail(url.as_str(), describe_reqwest(&e)))?;
    let (response, hops) = follow(&client, url, limits).await?;
    // The last hop is the one that answered.
    let shown_url = hops.last().map_or_else(|| url.to_string(), Clone::clone);
    let status = response.status();
    if !status.is_success() {
        return Err(IntakeError::Status {
            url: shown_url,
            status: status.as_u16(),
        });
    }
    let cap = Cap {
        url: url.to_string(),
        limits,
        budget_left,
    };
    if response.content_length().is_some_and(|n| n > cap.bytes()) {
        return Err(cap.exceeded());
    }
    let (size, sha256) = save(response, &shown_url, dst, &cap).await?;
    Ok(Fetched {
        size,
        sha256,
        hops,
        final_url: shown_url,
    })
}

fn fail(at: &str, message: String) -> IntakeError {
    IntakeError::Download {
        url: at.to_string(),
        message,
    }
}

/// A client that never follows a redirect or a proxy on its own and resolves only checked
/// addresses.
fn client(limits: &IntakeLimits) -> reqwest::Result<reqwest::Client> {
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        // An environment proxy would connect to addresses this module never saw.
        .no_proxy()
        .dns_resolver(urlcheck::CheckedResolver {
            allow_private: limits.allow_private,
        })
        .timeout(limits.download_timeout)
        .connect_timeout(limits.download_timeout.min(Duration::from_secs(30)))
        .user_agent(concat!("golem-orch/", env!("CARGO_PKG_VERSION")))
        .build()
}

/// Requests `url` and each redirect in turn, checking every hop before it is requested.
/// Returns the first answer that is not a redirect and every URL requested, in order.
async fn follow(
    client: &reqwest::Client,
    url: &reqwest::Url,
    limits: &IntakeLimits,
) -> Result<(reqwest::Response, Vec<String>), IntakeError> {
    let mut current = url.clone();
    let mut hops = vec![current.to_string()];
    loop {
        urlcheck::check_url(&current, limits.allow_private)
            .map_err(|m| fail(current.as_str(), m))?;
        let response = client
            .get(current.clone())
            .send()
            .await
            .map_err(|e| fail(current.as_str(), describe_reqwest(&e)))?;
        let location = response
            .headers()
            .get(reqwest::header::LOCATION)
            .filter(|_| response.status().is_redirection());
        let Some(location) = location else {
            return Ok((response, hops));
        };
        if hops.len() > limits.max_redirects {
            return Err(fail(url.as_str(), "too many redirects".into()));
        }
        let next = redirect_target(&current, location)?;
        hops.push(next.to_string());
        current = next;
    }
}

/// Where a redirect from `current` points, if it is a readable http(s) URL.
fn redirect_target(
    current: &reqwest::Url,
    location: &reqwest::header::HeaderValue,
) -> Result<reqwest::Url, IntakeError> {
    let next = location
        .to_str()
        .ok()
        .and_then(|l| current.join(l).ok())
        .ok_or_else(|| {
            fail(
                current.as_str(),
                "redirect to an unreadable location".into(),
            )
        })?;
    if !fetchable(&next) {
        return Err(fail(
            current.as_str(),
            format!("redirect to {next}: only http and https URLs are supported"),
        ));
    }
    Ok(next)
}

/// The size cap on one download: the download cap or what is left of the input cap, whichever
/// is smaller, named after the one that binds.
struct Cap<'a> {
    url: String,
    limits: &'a IntakeLimits,
    budget_left: u64,
}

impl Cap<'_> {
    fn bytes(&self) -> u64 {
        self.limits.max_download_bytes.min(self.budget_left)
    }

    fn exceeded(&self) -> IntakeError {
        if self.budget_left < self.limits.max_download_bytes {
            IntakeError::OverCap {
                path: self.url.clone(),
                limit: self.limits.max_total_bytes,
            }
        } else {
            IntakeError::TooLarge {
                url: self.url.clone(),
                limit: self.limits.max_download_bytes,
            }
        }
    }
}

/// Streams the body to `dst`, hashing it and checking the cap on every chunk.
async fn save(
    response: reqwest::Response,
    shown_url: &str,
    dst: &Path,
    cap: &Cap<'_>,
) -> Result<(u64, String), IntakeError> {
    let limit = cap.bytes();
    let mut file = create_copy(dst)?;
    let mut hasher = Sha256::new();
    let mut size = 0u64;
    let mut body = response.bytes_stream();
    while let Some(chunk) = body.next().await {
        let chunk = chunk.map_err(|e| fail(shown_url, describe_reqwest(&e)))?;
        size += chunk.len() as u64;
        if size > limit {
            return Err(cap.exceeded());
        }
        hasher.update(&chunk);
        file.write_all(&chunk).map_err(io_err(dst))?;
    }
    file.sync_all().map_err(io_err(dst))?;
    Ok((size, hex::encode(hasher.finalize())))
}

/// reqwest's top-level message hides the cause ("error sending request"); show the root cause.
fn describe_reqwest(e: &reqwest::Error) -> String {
    if e.is_timeout() {
        return "timed out".into();
    }
    let mut msg = e.to_string();
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        msg = s.to_string();
        source = s.source();
    }
    msg.replace(['\n', '\r'], " ")
}
