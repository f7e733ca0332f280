//! CPU affinity of threads: pinning a load generator, a probe or a test
//! workload to a CPU. One implementation for every crate.

/// Restricts thread `tid` (0: the calling thread) to `cpus`.
pub fn set_thread_affinity(tid: u32, cpus: &[u32]) -> std::io::Result<()> {
    // SAFETY: a zeroed cpu_set_t is the empty set (CPU_ZERO).
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    let capacity = 8 * std::mem::size_of::<libc::cpu_set_t>();
    for &c in cpus {
        if c as usize >= capacity {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                format!("CPU {c} is beyond the {capacity} CPUs an affinity mask holds"),
            ));
        }
        // SAFETY: `c` is inside the set, checked above.
        unsafe { libc::CPU_SET(c as usize, &mut set) };
    }
    // SAFETY: `set` is a valid cpu_set_t of the size passed.
    let r =
        unsafe { libc::sched_setaffinity(tid as libc::pid_t, std::mem::size_of_val(&set), &set) };
    if r == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// Pins the calling thread to one CPU.
pub fn pin_current_thread(cpu: u32) -> std::io::Result<()> {
    set_thread_affinity(0, &[cpu])
}

/// The CPUs thread `tid` (0: the calling thread) may run on, ascending.
pub fn thread_affinity(tid: u32) -> std::io::Result<Vec<u32>> {
    // SAFETY: a zeroed cpu_set_t is the empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: `set` is a valid, writable cpu_set_t of the size passed.
    let r = unsafe {
        libc::sched_getaffinity(tid as libc::pid_t, std::mem::size_of_val(&set), &mut set)
    };
    if r != 0 {
        return Err(std::io::Error::last_os_error());
    }
    let capacity = 8 * std::mem::size_of::<libc::cpu_set_t>();
    // SAFETY: every index is inside the set.
    Ok((0..capacity)
        .filter(|&c| unsafe { libc::CPU_ISSET(c, &set) })
        .map(|c| c as u32)
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pinning_a_thread_is_read_back() {
        std::thread::spawn(|| {
            let before = thread_affinity(0).unwrap();
            let last = *before.last().unwrap();
            pin_current_thread(last).unwrap();
            assert_eq!(thread_affinity(0).unwrap(), vec![last]);
            let err = set_thread_affinity(0, &[1 << 20]).unwrap_err();
            assert!(err.to_string().contains("beyond"), "{err}");
        })
        .join()
        .unwrap();
    }
}
