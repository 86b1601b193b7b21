//! The out-of-process peers of the plugin-call benchmark, doing exactly the
//! echo plugin's JSON work (`voodu_echo::answer_validate_json`):
//!
//! - `echo-peer` with no argument: exec-per-call, the way voodu's plugins
//!   work today: one request on stdin, one reply on stdout, then exit.
//! - `echo-peer serve SOCKET`: a persistent process answering over a unix
//!   socket, the way go-plugin works. Frames are a little-endian u32 length
//!   followed by that many bytes, in both directions.

use std::io::{Read, Write};
use std::os::unix::net::{UnixListener, UnixStream};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.as_slice() {
        [] => {
            let mut request = Vec::new();
            std::io::stdin().read_to_end(&mut request)?;
            let reply = voodu_echo::answer_validate_json(&request)?;
            std::io::stdout().write_all(&reply)?;
            Ok(())
        }
        [mode, socket] if mode == "serve" => {
            let listener = UnixListener::bind(socket)?;
            for stream in listener.incoming() {
                serve(stream?)?;
            }
            Ok(())
        }
        _ => Err("usage: echo-peer [serve SOCKET]".into()),
    }
}

fn serve(mut stream: UnixStream) -> std::io::Result<()> {
    let mut length = [0u8; 4];
    let mut request = Vec::new();
    loop {
        if stream.read_exact(&mut length).is_err() {
            return Ok(());
        }
        request.resize(u32::from_le_bytes(length) as usize, 0);
        stream.read_exact(&mut request)?;
        let reply = voodu_echo::answer_validate_json(&request).unwrap_or_default();
        stream.write_all(&(reply.len() as u32).to_le_bytes())?;
        stream.write_all(&reply)?;
    }
}
