//! Serves a script file on loopback: `golem-test-upstream SCRIPT.json [PORT]`.
//!
//! The script is a JSON array of replies (see [`golem_test_upstream::Reply`]). The base URL is
//! printed on the first line so a shell example or the bench can point `GOLEM_MODEL_BASE_URL`
//! at it; the server runs until interrupted.

use golem_test_upstream::{Reply, Upstream};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let Some(path) = args.next() else {
        return Err("usage: golem-test-upstream SCRIPT.json [PORT]".into());
    };
    let port: u16 = args.next().map_or(Ok(0), |p| p.parse())?;
    let script: Vec<Reply> = serde_json::from_str(&std::fs::read_to_string(&path)?)?;
    let upstream = Upstream::start_on(script, port).await?;
    println!("{}", upstream.base_url());
    tokio::signal::ctrl_c().await?;
    Ok(())
}
