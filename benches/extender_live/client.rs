//! A minimal HTTP/1.1 client on loopback: one kept-alive connection per caller, as kube-scheduler's Go client
//! keeps one, a POST with a `Content-Length`, and the answer read whole (fixed length, chunked, or to the close).
//! Blocking on purpose: each load client is a thread, so the timing covers the exchange and nothing else.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::time::Duration;

pub struct Conn {
    port: u16,
    stream: Option<BufReader<TcpStream>>,
}

/// One answer: status and body (status 0 when the peer closed the connection without answering).
pub struct Answer {
    pub status: u16,
    pub body: Vec<u8>,
}

impl Conn {
    pub fn new(port: u16) -> Conn {
        Conn { port, stream: None }
    }

    /// POSTs `body` to `path`; one retry on a fresh connection when a kept-alive one turns out closed.
    pub fn post(&mut self, path: &str, body: &[u8]) -> Answer {
        let reused = self.stream.is_some();
        match self.exchange(path, body) {
            Ok(a) => a,
            Err(_) if reused => {
                self.stream = None;
                self.exchange(path, body).unwrap_or(Answer {
                    status: 0,
                    body: Vec::new(),
                })
            }
            Err(_) => Answer {
                status: 0,
                body: Vec::new(),
            },
        }
    }

    fn exchange(&mut self, path: &str, body: &[u8]) -> std::io::Result<Answer> {
        if self.stream.is_none() {
            let s = TcpStream::connect(("127.0.0.1", self.port))?;
            s.set_nodelay(true)?;
            s.set_read_timeout(Some(Duration::from_secs(120)))?;
            self.stream = Some(BufReader::with_capacity(1 << 16, s));
        }
        let stream = self.stream.as_mut().expect("connected above");
        let head = format!(
            "POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n\
             Accept: application/json\r\nContent-Length: {}\r\n\r\n",
            body.len()
        );
        let sent = stream
            .get_mut()
            .write_all(head.as_bytes())
            .and_then(|()| stream.get_mut().write_all(body));
        // NB: a server refusing a large body may answer and close before reading it all; the write then fails
        // but the answer is there to read.
        let answer = read_answer(stream);
        match (sent, answer) {
            (_, Ok((a, keep))) => {
                if !keep {
                    self.stream = None;
                }
                Ok(a)
            }
            (Err(e), Err(_)) | (Ok(()), Err(e)) => {
                self.stream = None;
                Err(e)
            }
        }
    }
}

/// The answer and whether the connection stays open.
fn read_answer(r: &mut BufReader<TcpStream>) -> std::io::Result<(Answer, bool)> {
    let mut line = String::new();
    if r.read_line(&mut line)? == 0 {
        return Err(std::io::ErrorKind::UnexpectedEof.into());
    }
    let status: u16 = line
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or(std::io::ErrorKind::InvalidData)?;
    let (mut length, mut chunked, mut keep) = (None, false, true);
    loop {
        line.clear();
        r.read_line(&mut line)?;
        let l = line.trim_end();
        if l.is_empty() {
            break;
        }
        let (name, value) = l.split_once(':').unwrap_or((l, ""));
        let value = value.trim();
        match name.to_ascii_lowercase().as_str() {
            "content-length" => length = value.parse::<usize>().ok(),
            "transfer-encoding" => chunked = value.eq_ignore_ascii_case("chunked"),
            "connection" => keep = !value.eq_ignore_ascii_case("close"),
            _ => {}
        }
    }
    let mut body = Vec::new();
    if chunked {
        loop {
            line.clear();
            r.read_line(&mut line)?;
            let size = usize::from_str_radix(line.trim().split(';').next().unwrap_or(""), 16)
                .map_err(|_| std::io::Error::from(std::io::ErrorKind::InvalidData))?;
            if size == 0 {
                // Trailers (none expected) end with an empty line.
                loop {
                    line.clear();
                    r.read_line(&mut line)?;
                    if line.trim().is_empty() {
                        break;
                    }
                }
                break;
            }
            let start = body.len();
            body.resize(start + size, 0);
            r.read_exact(&mut body[start..])?;
            line.clear();
            r.read_line(&mut line)?;
        }
    } else if let Some(n) = length {
        body.resize(n, 0);
        r.read_exact(&mut body)?;
    } else {
        r.read_to_end(&mut body)?;
        keep = false;
    }
    Ok((Answer { status, body }, keep))
}

impl Answer {
    /// The status and the start of the body, for the page: `400 "bad request"`.
    pub fn summary(&self) -> String {
        if self.status == 0 {
            return "no answer (connection closed)".into();
        }
        let text = String::from_utf8_lossy(&self.body);
        let text: String = text.trim().chars().take(100).collect();
        let text = text.replace('|', "\\|").replace('\n', " ");
        format!("{} `{}`", self.status, text)
    }
}
