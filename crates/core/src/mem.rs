//! Fresh anonymous memory with a known page-fault count: the workload behind
//! the page-fault known-answer tests, the `hwqos-testload` page workload and
//! the page-fault probe. Each small page of a [`FreshPages`] mapping faults
//! exactly once on its first write. [`AnonMapping`] is the plain mapping
//! underneath, for probes that need their own layout (the pointer chase).

use std::io;

/// A private, zero-filled, read-write anonymous mapping, unmapped on drop.
pub struct AnonMapping {
    base: *mut u8,
    len: usize,
}

impl AnonMapping {
    /// Maps `len` bytes (rounded up to pages by the kernel); `len == 0` maps
    /// nothing.
    pub fn map(len: usize) -> io::Result<AnonMapping> {
        if len == 0 {
            return Ok(AnonMapping {
                base: std::ptr::null_mut(),
                len,
            });
        }
        // SAFETY: a fresh private anonymous mapping; checked for MAP_FAILED.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if base == libc::MAP_FAILED {
            let e = io::Error::last_os_error();
            return Err(io::Error::new(
                e.kind(),
                format!("mmap of {len} bytes: {e}"),
            ));
        }
        Ok(AnonMapping {
            base: base.cast(),
            len,
        })
    }

    /// The first byte of the mapping (null when empty).
    pub fn as_ptr(&self) -> *mut u8 {
        self.base
    }

    /// The mapped length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether nothing is mapped.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// `madvise(advice)` on `len` bytes from `offset`; false when the kernel
    /// refused (for example no transparent huge pages).
    pub fn advise(&self, offset: usize, len: usize, advice: libc::c_int) -> bool {
        assert!(offset.checked_add(len).is_some_and(|end| end <= self.len));
        if len == 0 {
            return true;
        }
        // SAFETY: the range lies inside this mapping (asserted above).
        unsafe { libc::madvise(self.base.add(offset).cast(), len, advice) == 0 }
    }
}

impl Drop for AnonMapping {
    fn drop(&mut self) {
        if self.len > 0 {
            // SAFETY: unmapping the mapping this value owns.
            unsafe { libc::munmap(self.base.cast(), self.len) };
        }
    }
}

/// An [`AnonMapping`] of small pages (transparent huge pages are disabled for
/// it) whose pages are still untouched.
pub struct FreshPages {
    mapping: AnonMapping,
    page: usize,
}

impl FreshPages {
    /// Maps `pages` pages of the system page size; nothing is touched yet.
    pub fn map(pages: usize) -> io::Result<FreshPages> {
        // SAFETY: sysconf has no preconditions.
        let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
        let page =
            usize::try_from(page).map_err(|_| io::Error::other("sysconf(_SC_PAGESIZE) failed"))?;
        let len = pages.checked_mul(page).ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{pages} pages overflow the address space"),
            )
        })?;
        let mapping = AnonMapping::map(len)?;
        // A huge page would turn 512 first writes into one fault. Failure (no
        // THP support) leaves small pages anyway.
        mapping.advise(0, len, libc::MADV_NOHUGEPAGE);
        Ok(FreshPages { mapping, page })
    }

    /// The number of pages.
    pub fn pages(&self) -> usize {
        self.mapping.len() / self.page
    }

    /// Writes one byte to every page: one minor fault each the first time.
    pub fn touch_all(&mut self) {
        for offset in (0..self.mapping.len()).step_by(self.page) {
            // SAFETY: offset < len, inside the mapping.
            unsafe { std::ptr::write_volatile(self.mapping.as_ptr().add(offset), 1) };
        }
    }
}

/// Maps `pages` fresh pages, writes one byte to each and unmaps them.
pub fn touch_fresh_pages(pages: usize) -> io::Result<()> {
    FreshPages::map(pages)?.touch_all();
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn minor_faults() -> i64 {
        // SAFETY: an all-zero rusage is a valid value (plain integers).
        let mut u: libc::rusage = unsafe { std::mem::zeroed() };
        // SAFETY: `u` is a valid out-pointer.
        unsafe { libc::getrusage(libc::RUSAGE_THREAD, &mut u) };
        u.ru_minflt
    }

    #[test]
    fn every_page_faults_once_on_its_first_write_only() {
        let mut m = FreshPages::map(1000).unwrap();
        assert_eq!(m.pages(), 1000);
        let before = minor_faults();
        m.touch_all();
        let first = minor_faults() - before;
        m.touch_all();
        let second = minor_faults() - before - first;
        assert!((1000..=1010).contains(&first), "first pass: {first} faults");
        assert_eq!(second, 0, "second pass faulted");
    }

    #[test]
    fn zero_pages_and_overflow() {
        touch_fresh_pages(0).unwrap();
        let e = FreshPages::map(usize::MAX).err().unwrap();
        assert!(e.to_string().contains("overflow"), "{e}");
    }
}
