//! `vd dial-stdio`: joins standard input and output to the controller's
//! socket, what `vd -H ssh://host` runs on the host (as `docker system
//! dial-stdio` does for `docker -H ssh://`). The end of standard input
//! ends what is sent (the socket is shut for writing), and the end of
//! what the controller sends ends the process.

use std::io::{Read, Write};
use std::net::Shutdown;
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::process::ExitCode;

use voodu_api::client::ClientError;
use voodu_api::ssh::DIAL_NO_CONTROLLER;
use voodu_api::SOCKET_FILE;

use crate::{fail, EXIT_FAILED};

/// Joins this process's standard input and output to the socket of the
/// controller serving `root`, until the controller ends the connection.
pub fn run(root: &Path) -> ExitCode {
    let socket = root.join(SOCKET_FILE);
    let stream = match UnixStream::connect(&socket) {
        Ok(stream) => stream,
        Err(source) if source.kind() == std::io::ErrorKind::PermissionDenied => {
            let error = ClientError::NotAllowed {
                socket: socket.display().to_string(),
            };
            return fail(error, EXIT_FAILED);
        }
        Err(source) => {
            let error = ClientError::NotRunning {
                root: root.display().to_string(),
                socket: socket.display().to_string(),
                source,
            };
            return fail(error, DIAL_NO_CONTROLLER as u8);
        }
    };
    let mut to_controller = match stream.try_clone() {
        Ok(stream) => stream,
        Err(error) => return fail(format!("vd dial-stdio: {error}"), EXIT_FAILED),
    };
    std::thread::spawn(move || {
        let _ = std::io::copy(&mut std::io::stdin().lock(), &mut to_controller);
        let _ = to_controller.shutdown(Shutdown::Write);
    });
    let mut from_controller = stream;
    let mut stdout = std::io::stdout().lock();
    let mut buffer = vec![0u8; 64 * 1024];
    loop {
        let read = match from_controller.read(&mut buffer) {
            Ok(0) => break,
            Ok(read) => read,
            Err(error) if error.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(_) => break,
        };
        // The client went away (its ssh ended): so does this side.
        if stdout
            .write_all(&buffer[..read])
            .and_then(|()| stdout.flush())
            .is_err()
        {
            break;
        }
    }
    // The thread copying standard input may still wait on it; the process
    // ends here all the same.
    std::process::exit(0)
}
