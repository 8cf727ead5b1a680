//! Warm buffers: the few large byte buffers a server fills per request (a request body, an answer echoing a
//! 5,000-Node list, tens of MiB each) kept between requests instead of handed back to the system.
//!
//! ```text
//!  take(n) ─> a kept buffer (cleared) or a new one ─> filled ─> bytes(buf): Bytes owning it
//!                                                               └─ last clone dropped ─> kept (at most `spares`,
//!                                                                  each `min..=max` bytes) ─> released once unused
//!                                                                  for `idle` (trim, or the next take or give)
//! ```
//!
//! NB: why at all: the allocator maps a buffer this large afresh each time and unmaps it on free, so every request
//! paid one page fault per 4 KiB touched (with the kernel zeroing each page): on the machines here that was a third
//! of the extender's CPU for a 5,000-Node filter. A kept buffer's pages are already there. A buffer's old bytes
//! past its length are never readable (it is cleared before reuse and only ever grows by writes).

use std::sync::Mutex;
use std::time::{Duration, Instant};

use bytes::Bytes;

/// The process's pool, shared by the bounded server's body reader and the extender's answer encoder.
pub static WARM: Warm = Warm::new(2, 1 << 20, 64 << 20, Duration::from_secs(30));

pub struct Warm {
    kept: Mutex<Vec<WarmKept>>,
    /// Buffers kept at most.
    spares: usize,
    /// Smaller buffers are left to the allocator, which reuses them cheaply.
    min: usize,
    /// Larger buffers are not kept (the memory would stay claimed for a rare request).
    max: usize,
    /// A buffer unused this long is released.
    idle: Duration,
}

struct WarmKept {
    buf: Vec<u8>,
    since: Instant,
}

impl Warm {
    pub const fn new(spares: usize, min: usize, max: usize, idle: Duration) -> Warm {
        Warm {
            kept: Mutex::new(Vec::new()),
            spares,
            min,
            max,
            idle,
        }
    }

    /// An empty buffer with room for at least `capacity` bytes: a kept one when there is one.
    pub fn take(&self, capacity: usize) -> Vec<u8> {
        if capacity < self.min {
            return Vec::with_capacity(capacity);
        }
        let found = {
            let mut kept = self.lock();
            self.drop_stale(&mut kept, Instant::now());
            // The smallest that fits, else the largest (growing it keeps the pages it has).
            let fits = kept
                .iter()
                .enumerate()
                .filter(|(_, k)| k.buf.capacity() >= capacity)
                .min_by_key(|(_, k)| k.buf.capacity())
                .or_else(|| {
                    kept.iter()
                        .enumerate()
                        .max_by_key(|(_, k)| k.buf.capacity())
                })
                .map(|(i, _)| i);
            fits.map(|i| kept.swap_remove(i).buf)
        };
        let mut buf = found.unwrap_or_default();
        buf.clear();
        buf.reserve(capacity);
        buf
    }

    /// `buf` as `Bytes`; when the last clone is dropped the buffer comes back here.
    pub fn bytes(&'static self, buf: Vec<u8>) -> Bytes {
        if buf.capacity() < self.min {
            return Bytes::from(buf);
        }
        Bytes::from_owner(Owned { buf, home: self })
    }

    /// Keeps `buf` for a later `take` when it is worth keeping and there is room.
    pub fn give(&self, mut buf: Vec<u8>) {
        if !(self.min..=self.max).contains(&buf.capacity()) {
            return;
        }
        buf.clear();
        let now = Instant::now();
        let mut kept = self.lock();
        self.drop_stale(&mut kept, now);
        if kept.len() < self.spares {
            kept.push(WarmKept { buf, since: now });
        } else if let Some(smallest) = kept.iter_mut().min_by_key(|k| k.buf.capacity())
            && smallest.buf.capacity() < buf.capacity()
        {
            *smallest = WarmKept { buf, since: now };
        }
    }

    /// Releases the buffers unused for `idle`; the server calls this now and then so an idle process shrinks.
    pub fn trim(&self) {
        let mut kept = self.lock();
        self.drop_stale(&mut kept, Instant::now());
    }

    /// Bytes held for later requests.
    #[cfg(test)]
    fn held(&self) -> usize {
        self.lock().iter().map(|k| k.buf.capacity()).sum()
    }

    fn drop_stale(&self, kept: &mut Vec<WarmKept>, now: Instant) {
        kept.retain(|k| now.saturating_duration_since(k.since) < self.idle);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<WarmKept>> {
        // NB: a panic while holding the lock leaves a plain list of buffers, still consistent.
        self.kept
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// The owner behind a `Bytes` made by [`Warm::bytes`].
struct Owned {
    buf: Vec<u8>,
    home: &'static Warm,
}

impl AsRef<[u8]> for Owned {
    fn as_ref(&self) -> &[u8] {
        &self.buf
    }
}

impl Drop for Owned {
    fn drop(&mut self) {
        self.home.give(std::mem::take(&mut self.buf));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: usize = 1 << 20;

    fn pool(spares: usize, idle: Duration) -> &'static Warm {
        Box::leak(Box::new(Warm::new(spares, MIB, 8 * MIB, idle)))
    }

    #[test]
    fn a_buffer_dropped_as_bytes_is_taken_again_with_its_pages() {
        let warm = pool(2, Duration::from_secs(60));
        let mut buf = warm.take(2 * MIB);
        buf.extend_from_slice(&vec![7u8; 2 * MIB]);
        let first = buf.as_ptr();
        let bytes = warm.bytes(buf);
        let part = bytes.slice(10..20);
        drop(bytes);
        assert_eq!(warm.held(), 0, "a clone still holds the buffer");
        drop(part);
        assert!(warm.held() >= 2 * MIB);
        let again = warm.take(MIB);
        assert_eq!(again.as_ptr(), first);
        assert!(again.is_empty(), "a reused buffer starts empty");
        assert_eq!(warm.held(), 0);
    }

    #[test]
    fn small_and_oversized_buffers_are_left_to_the_allocator() {
        let warm = pool(2, Duration::from_secs(60));
        drop(warm.bytes(warm.take(1000)));
        warm.give(Vec::with_capacity(9 * MIB));
        assert_eq!(warm.held(), 0);
    }

    #[test]
    fn at_most_the_spares_are_kept_and_the_largest_win() {
        let warm = pool(2, Duration::from_secs(60));
        for mib in [2, 3, 4] {
            warm.give(Vec::with_capacity(mib * MIB));
        }
        let held = warm.held();
        assert!((7 * MIB..8 * MIB).contains(&held), "kept {held} bytes");
        // The smallest that fits is taken; a request larger than all takes the largest and grows it.
        assert!(warm.take(MIB).capacity() < 4 * MIB);
        assert!(warm.take(6 * MIB).capacity() >= 6 * MIB);
        assert_eq!(warm.held(), 0);
    }

    #[test]
    fn buffers_unused_for_the_idle_time_are_released() {
        let warm = pool(2, Duration::from_millis(20));
        warm.give(Vec::with_capacity(2 * MIB));
        assert!(warm.held() > 0);
        std::thread::sleep(Duration::from_millis(40));
        warm.trim();
        assert_eq!(warm.held(), 0);
    }
}
