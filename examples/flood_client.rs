//! A client holding many idle (or slowloris) connections to one loopback port for a while, then reporting how many
//! it made and how many the server closed: `FLOOD <connected> <closed>`. The `attack_flood` e2e tests start
//! several, since one process cannot hold more than the machine's 20,000 descriptors. Only ever 127.0.0.1.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

fn main() {
    let var = |k: &str| {
        std::env::var(k).unwrap_or_else(|_| panic!("{k} is not set: run by attack_flood only"))
    };
    let port: u16 = var("LOCALPV_FLOOD_PORT").parse().expect("port");
    let count: usize = var("LOCALPV_FLOOD_COUNT").parse().expect("count");
    let secs: u64 = var("LOCALPV_FLOOD_SECS").parse().expect("secs");
    let slow = var("LOCALPV_FLOOD_MODE") == "slowloris";
    let until = Instant::now() + Duration::from_secs(secs);
    let addr = std::net::SocketAddr::from(([127, 0, 0, 1], port));
    // Four connecting threads: one blocking connect at a time cannot outpace a busy server's accept loop.
    let connectors: Vec<_> = (0..4)
        .map(|_| {
            std::thread::spawn(move || {
                let mut held = Vec::new();
                while held.len() < count.div_ceil(4) && Instant::now() < until {
                    match TcpStream::connect_timeout(&addr, Duration::from_millis(500)) {
                        Ok(mut s) => {
                            if slow {
                                let _ = s.write_all(b"POST /filter HTTP/1.1\r\nHost: x\r\n");
                            }
                            held.push(s);
                        }
                        Err(_) => std::thread::sleep(Duration::from_millis(10)),
                    }
                }
                held
            })
        })
        .collect();
    let mut held: Vec<TcpStream> = connectors
        .into_iter()
        .flat_map(|t| t.join().expect("connector thread"))
        .collect();
    let connected = held.len();
    while Instant::now() < until {
        std::thread::sleep(Duration::from_millis(500));
        if slow {
            for s in &mut held {
                let _ = s.write_all(b"X: y\r\n");
            }
        }
    }
    let mut closed = 0;
    for s in &mut held {
        let _ = s.set_nonblocking(true);
        let mut buf = [0u8; 512];
        match s.read(&mut buf) {
            Ok(_) => closed += 1,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
            Err(_) => closed += 1,
        }
    }
    println!("FLOOD {connected} {closed}");
}
