//! Starting child processes from an agent.

/// Makes `cmd`'s child start with an empty signal mask. An agent that takes
/// its stop signals with `sigwait` blocks them in every thread, and a blocked
/// mask survives `fork` and `exec` (Rust's `Command` does not reset it): a
/// child started without this could not be stopped with SIGTERM or Ctrl-C.
pub fn clear_signal_mask_on_exec(cmd: &mut std::process::Command) -> &mut std::process::Command {
    use std::os::unix::process::CommandExt;
    // SAFETY: between fork and exec the closure calls only sigemptyset and
    // pthread_sigmask, both async-signal-safe, and allocates nothing.
    unsafe {
        cmd.pre_exec(|| {
            let mut empty: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut empty);
            match libc::pthread_sigmask(libc::SIG_SETMASK, &empty, std::ptr::null_mut()) {
                0 => Ok(()),
                e => Err(std::io::Error::from_raw_os_error(e)),
            }
        })
    }
}
