//! A release server on loopback for the install tests: real HTTP/1.1 over TCP, serving each
//! file at its path, 404 for any other, and a file that is cut off halfway (its whole length
//! announced, half its bytes sent, then the connection closed) the way a dropped download is,
//! and a stalled one (the request read, then nothing sent until the client gives up).
#![allow(dead_code)]

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::{Arc, Mutex};

/// How the server answers for one path.
#[derive(Clone)]
pub enum Served {
    Whole(Vec<u8>),
    CutOffHalfway(Vec<u8>),
    /// Nothing is answered; the connection stays open until the client closes it.
    Stall,
}

pub struct ReleaseServer {
    /// `http://127.0.0.1:<port>`, what the install's base URL is set to.
    pub base_url: String,
    requested: Arc<Mutex<Vec<String>>>,
}

impl ReleaseServer {
    /// Serves `files` (by path, e.g. `/v0.1.0/SHA256SUMS`) until the test process ends.
    pub fn start(files: HashMap<String, Served>) -> ReleaseServer {
        let listener = TcpListener::bind("127.0.0.1:0").expect("release server: bind");
        let base_url = format!(
            "http://{}",
            listener.local_addr().expect("release server: address")
        );
        let requested = Arc::new(Mutex::new(Vec::new()));
        let log = Arc::clone(&requested);
        let files = Arc::new(files);
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                let files = Arc::clone(&files);
                let log = Arc::clone(&log);
                std::thread::spawn(move || answer(stream, &files, &log));
            }
        });
        ReleaseServer {
            base_url,
            requested,
        }
    }

    /// The paths asked for so far, in order.
    pub fn requested(&self) -> Vec<String> {
        self.requested.lock().expect("release server log").clone()
    }
}

fn answer(mut stream: TcpStream, files: &HashMap<String, Served>, log: &Mutex<Vec<String>>) {
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        match stream.read(&mut byte) {
            Ok(1) => head.push(byte[0]),
            _ => return,
        }
    }
    let head = String::from_utf8_lossy(&head);
    let path = head.split(' ').nth(1).unwrap_or_default().to_owned();
    log.lock().expect("release server log").push(path.clone());
    if let Some(Served::Stall) = files.get(&path) {
        // Reads until the client hangs up: a read returns only then, as the client sends no
        // more after its request.
        let _ = stream.read(&mut [0u8; 64]);
        return;
    }
    let (status, body, cut_off) = match files.get(&path) {
        Some(Served::Whole(body)) => ("200 OK", body.as_slice(), false),
        Some(Served::CutOffHalfway(body)) => ("200 OK", body.as_slice(), true),
        Some(Served::Stall) | None => ("404 Not Found", &b"Not Found"[..], false),
    };
    let header = format!(
        "HTTP/1.1 {status}\r\nContent-Length: {}\r\nContent-Type: application/octet-stream\r\nConnection: close\r\n\r\n",
        body.len()
    );
    let sent = if cut_off {
        &body[..body.len() / 2]
    } else {
        body
    };
    let _ = stream.write_all(header.as_bytes());
    let _ = stream.write_all(sent);
    let _ = stream.flush();
    let _ = stream.shutdown(std::net::Shutdown::Both);
}
