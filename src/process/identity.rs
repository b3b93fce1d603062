//! F16, F26: identities that must be this process's own — a context's client id (the key of the
//! controller's request-id table) and job ids — drawn from the kernel's random source at each
//! use, so a child of `fork` never repeats what its parent or a sibling draws (no generator
//! state is copied by the fork).

use crate::wire::{ClientId, CLIENT_ID_LEN};

/// Fills `buf` from getrandom(2) (the kernel's CSPRNG; it blocks only before the pool is
/// initialised at boot). Falls back to the time and pid mixed through the std hasher if the
/// syscall is missing (pre-3.17 kernels).
pub fn fill_random(buf: &mut [u8]) {
    let mut done = 0;
    while done < buf.len() {
        let rest = &mut buf[done..];
        // SAFETY: getrandom(2) writes at most `rest.len()` bytes into the live slice.
        let n = unsafe { libc::getrandom(rest.as_mut_ptr().cast(), rest.len(), 0) };
        if n > 0 {
            done += n as usize;
        } else if std::io::Error::last_os_error().raw_os_error() != Some(libc::EINTR) {
            fallback(rest);
            return;
        }
    }
}

fn fallback(buf: &mut [u8]) {
    use std::hash::{BuildHasher, Hasher};
    for chunk in buf.chunks_mut(8) {
        let mut h = std::collections::hash_map::RandomState::new().build_hasher();
        h.write_i32(super::current_pid());
        h.write_u128(
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_nanos())
                .unwrap_or(0),
        );
        let v = h.finish().to_le_bytes();
        chunk.copy_from_slice(&v[..chunk.len()]);
    }
}

/// A random 64-bit value, fresh from the kernel.
pub fn random_u64() -> u64 {
    let mut b = [0u8; 8];
    fill_random(&mut b);
    u64::from_le_bytes(b)
}

/// A new client id (F16): random, this process's own (F26).
pub fn new_client_id() -> ClientId {
    let mut id = [0u8; CLIENT_ID_LEN];
    fill_random(&mut id);
    id
}
