//! A dead man's switch the kernel keeps: `SIGCONT` to a process when the
//! last process holding the switch dies, however it dies.
//!
//! [`DeadMan::arm`] makes a pipe and sets both of its ends to signal the
//! target (`O_ASYNC`, `F_SETOWN_EX` to the target's pid, `F_SETSIG =
//! SIGCONT`). When the last file of one end of a pipe is released while the
//! other end is still open, the kernel signals the owners of both ends
//! (`pipe_release()` → `kill_fasync()`), so whichever end goes first, the
//! target gets `SIGCONT`. Nobody ever reads or writes the pipe, so nothing
//! else signals it.
//!
//! The ends are not kept in the agent's file table: they are sent with
//! `SCM_RIGHTS` over a socket pair whose messages are never read, and closed
//! in the agent. When the agent dies the kernel releases its files in one
//! batch (the perf counters, whose overflow may `SIGSTOP` the target, among
//! them); releasing the socket pair there releases the in-flight pipe ends
//! only afterwards, in a second batch. So the `SIGCONT` comes after the last
//! counter of the dead agent is gone, and no late overflow can stop the
//! target again. (Both batches run before the agent's death is visible to
//! its parent; nothing here depends on timing.)
//!
//! The kernel sends a file-owner signal only when the process that set the
//! owner is root or shares a real or saved user id with the target
//! (`sigio_perm()`, the same rule as the direct overflow route);
//! [`DeadMan::can_signal`] says whether that holds.
//!
//! [`DeadMan`]'s `Drop` (an orderly release) takes the ends back and clears
//! `O_ASYNC` first, so a release that happens while the agent lives sends
//! nothing.

use crate::SchedError;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

/// A kernel-held promise to `SIGCONT` one process (see the module docs).
#[derive(Debug)]
pub struct DeadMan {
    pid: u32,
    /// The socket pair; the pipe's two ends are in flight from `tx` to `rx`.
    tx: OwnedFd,
    rx: OwnedFd,
}

// <linux/fcntl.h>; the libc crate does not export these for every target.
const F_SETSIG: libc::c_int = 10;
const F_SETOWN_EX: libc::c_int = 15;
const F_OWNER_PID: libc::c_int = 1;

#[repr(C)]
struct FOwnerEx {
    type_: libc::c_int,
    pid: libc::pid_t,
}

fn owned(fd: RawFd) -> OwnedFd {
    // SAFETY: callers pass a fresh fd they own.
    unsafe { OwnedFd::from_raw_fd(fd) }
}

impl DeadMan {
    /// Arms the switch for `pid`.
    pub fn arm(pid: u32) -> Result<DeadMan, SchedError> {
        let mut p = [0 as libc::c_int; 2];
        // SAFETY: pipe2 writes two fds into the array.
        if unsafe { libc::pipe2(p.as_mut_ptr(), libc::O_CLOEXEC | libc::O_NONBLOCK) } != 0 {
            return Err(SchedError::last_os("pipe2 (dead man's switch)"));
        }
        let (r, w) = (owned(p[0]), owned(p[1]));
        for fd in [&r, &w] {
            set_owner(fd.as_raw_fd(), pid)?;
        }
        let mut s = [0 as libc::c_int; 2];
        // SAFETY: socketpair writes two fds into the array.
        if unsafe {
            libc::socketpair(
                libc::AF_UNIX,
                libc::SOCK_DGRAM | libc::SOCK_CLOEXEC,
                0,
                s.as_mut_ptr(),
            )
        } != 0
        {
            return Err(SchedError::last_os("socketpair (dead man's switch)"));
        }
        let (tx, rx) = (owned(s[0]), owned(s[1]));
        send_fds(tx.as_raw_fd(), &[r.as_raw_fd(), w.as_raw_fd()])?;
        // Now the ends live only in flight; closing ours sends nothing (the
        // in-flight references keep both ends open).
        drop(r);
        drop(w);
        Ok(DeadMan { pid, tx, rx })
    }

    /// The process the switch continues.
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// Whether the kernel will deliver the switch's `SIGCONT` to the
    /// process whose `/proc/PID/status` is `status` (root, or the same real
    /// or saved user id as this process; `sigio_perm()`).
    pub fn can_signal(status: &str) -> bool {
        // SAFETY: getuid/geteuid have no preconditions.
        let (uid, euid) = unsafe { (libc::getuid(), libc::geteuid()) };
        if euid == 0 {
            return true;
        }
        let ids: Vec<u32> = status
            .lines()
            .find_map(|l| l.strip_prefix("Uid:"))
            .map(|v| {
                v.split_whitespace()
                    .filter_map(|x| x.parse().ok())
                    .collect()
            })
            .unwrap_or_default();
        let found = [ids.first(), ids.get(2)]
            .into_iter()
            .flatten()
            .any(|t| *t == uid || *t == euid);
        found
    }
}

impl Drop for DeadMan {
    /// Orderly release: take the pipe ends back, stop them signalling, close.
    fn drop(&mut self) {
        let _ = &self.tx;
        // Every end stops signalling before any is closed (closing one end
        // signals the other's owner).
        let ends = recv_fds(self.rx.as_raw_fd());
        for fd in &ends {
            // SAFETY: fcntl on an fd we own.
            unsafe {
                let fl = libc::fcntl(fd.as_raw_fd(), libc::F_GETFL);
                libc::fcntl(fd.as_raw_fd(), libc::F_SETFL, fl & !libc::O_ASYNC);
            }
        }
    }
}

fn set_owner(fd: RawFd, pid: u32) -> Result<(), SchedError> {
    let owner = FOwnerEx {
        type_: F_OWNER_PID,
        pid: pid as libc::pid_t,
    };
    // SAFETY: fcntl on an fd we own with valid arguments.
    unsafe {
        if libc::fcntl(fd, F_SETOWN_EX, &owner as *const FOwnerEx) != 0 {
            return Err(SchedError::last_os(
                "fcntl(F_SETOWN_EX) (dead man's switch)",
            ));
        }
        if libc::fcntl(fd, F_SETSIG, libc::SIGCONT) != 0 {
            return Err(SchedError::last_os("fcntl(F_SETSIG) (dead man's switch)"));
        }
        let fl = libc::fcntl(fd, libc::F_GETFL);
        if libc::fcntl(fd, libc::F_SETFL, fl | libc::O_ASYNC) != 0 {
            return Err(SchedError::last_os("fcntl(O_ASYNC) (dead man's switch)"));
        }
    }
    Ok(())
}

const CMSG_SPACE_2: usize = 64;

fn send_fds(sock: RawFd, fds: &[RawFd; 2]) -> Result<(), SchedError> {
    let mut byte = [0u8; 1];
    let mut iov = libc::iovec {
        iov_base: byte.as_mut_ptr().cast(),
        iov_len: 1,
    };
    let mut cbuf = [0u64; CMSG_SPACE_2 / 8];
    // SAFETY: msghdr/cmsg set up over local buffers sized by CMSG_SPACE.
    unsafe {
        let payload = std::mem::size_of_val(fds) as u32;
        let space = libc::CMSG_SPACE(payload) as usize;
        assert!(space <= CMSG_SPACE_2);
        let mut msg: libc::msghdr = std::mem::zeroed();
        msg.msg_iov = &mut iov;
        msg.msg_iovlen = 1;
        msg.msg_control = cbuf.as_mut_ptr().cast();
        msg.msg_controllen = space as _;
        let cmsg = libc::CMSG_FIRSTHDR(&msg);
        (*cmsg).cmsg_level = libc::SOL_SOCKET;
        (*cmsg).cmsg_type = libc::SCM_RIGHTS;
        (*cmsg).cmsg_len = libc::CMSG_LEN(payload) as _;
        std::ptr::copy_nonoverlapping(
            fds.as_ptr().cast::<u8>(),
            libc::CMSG_DATA(cmsg),
            payload as usize,
        );
        if libc::sendmsg(sock, &msg, libc::MSG_DONTWAIT) != 1 {
            return Err(SchedError::last_os(
                "sendmsg(SCM_RIGHTS) (dead man's switch)",
            ));
        }
    }
    Ok(())
}

fn recv_fds(sock: RawFd) -> Vec<OwnedFd> {
    let mut byte = [0u8; 1];
    let mut iov = libc::iovec {
        iov_base: byte.as_mut_ptr().cast(),
        iov_len: 1,
    };
    let mut cbuf = [0u64; CMSG_SPACE_2 / 8];
    let mut out = Vec::new();
    // SAFETY: msghdr/cmsg over local buffers; the kernel fills at most
    // msg_controllen bytes; fds received are fresh and ours.
    unsafe {
        let mut msg: libc::msghdr = std::mem::zeroed();
        msg.msg_iov = &mut iov;
        msg.msg_iovlen = 1;
        msg.msg_control = cbuf.as_mut_ptr().cast();
        msg.msg_controllen = CMSG_SPACE_2 as _;
        if libc::recvmsg(sock, &mut msg, libc::MSG_DONTWAIT | libc::MSG_CMSG_CLOEXEC) < 0 {
            return out;
        }
        let mut cmsg = libc::CMSG_FIRSTHDR(&msg);
        while !cmsg.is_null() {
            if (*cmsg).cmsg_level == libc::SOL_SOCKET && (*cmsg).cmsg_type == libc::SCM_RIGHTS {
                let data = libc::CMSG_DATA(cmsg);
                let len = (*cmsg).cmsg_len as usize - (data as usize - cmsg as usize);
                let n = len / std::mem::size_of::<RawFd>();
                for i in 0..n {
                    let fd = std::ptr::read_unaligned(data.cast::<RawFd>().add(i));
                    out.push(owned(fd));
                }
            }
            cmsg = libc::CMSG_NXTHDR(&msg, cmsg);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    fn wait_state(pid: u32, want: impl Fn(Option<char>) -> bool) -> bool {
        for _ in 0..300 {
            if want(crate::proc::task_state(Path::new("/proc"), pid)) {
                return true;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        false
    }

    /// The holder's death continues the target; an orderly drop does not
    /// signal it.
    #[test]
    fn the_holders_death_continues_the_target_and_a_drop_does_not() {
        let mut target = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        let pid = target.id();
        // Orderly drop while stopped: nothing continues it.
        // SAFETY: kill(2) on a process of this test; no memory is involved.
        unsafe { libc::kill(pid as i32, libc::SIGSTOP) };
        assert!(wait_state(pid, |s| s == Some('T')));
        drop(DeadMan::arm(pid).unwrap());
        std::thread::sleep(std::time::Duration::from_millis(50));
        assert_eq!(
            crate::proc::task_state(Path::new("/proc"), pid),
            Some('T'),
            "an orderly drop sent SIGCONT"
        );
        // A holder that dies by SIGKILL: the kernel continues the target.
        // SAFETY: the child only arms the switch and waits to be killed.
        let holder = unsafe { libc::fork() };
        if holder == 0 {
            let d = DeadMan::arm(pid);
            std::mem::forget(d);
            loop {
                // SAFETY: pause has no preconditions.
                unsafe { libc::pause() };
            }
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
        assert_eq!(crate::proc::task_state(Path::new("/proc"), pid), Some('T'));
        // SAFETY: kill(2) and waitpid(2) on this test's own child; waitpid
        // may take a null status pointer.
        unsafe {
            libc::kill(holder, libc::SIGKILL);
            libc::waitpid(holder, std::ptr::null_mut(), 0);
        }
        let continued = wait_state(pid, |s| s != Some('T'));
        if !continued {
            // SAFETY: kill(2) on a process of this test; no memory is involved.
            unsafe { libc::kill(pid as i32, libc::SIGCONT) };
        }
        target.kill().unwrap();
        target.wait().unwrap();
        assert!(continued, "the holder died and the target stayed stopped");
    }
}
