//! Context switches: two threads on the same CPU pass a byte back and forth
//! through two pipes; each hand-over is one switch. The knob is switches per
//! second; the partner thread is pinned to the same CPU and stopped with the
//! generator.
//!
//! The knob is the context-switch rate of *all* generator threads on the CPU
//! (their sleeps every slice and their preemptions count too): every 100 ms
//! the generator counts the switches of its siblings (`/proc/self/task`)
//! beyond its own hand-overs and hands over that many fewer (see
//! [`super::Siblings`]).

use super::{paced, pin_to_cpu, thread_switches, Context, SiblingTotal};
use crate::knob::Knob;
use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::FromRawFd;

fn pipe() -> std::io::Result<(File, File)> {
    let mut fds = [0; 2];
    // SAFETY: fds is a valid two-element out array.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: both descriptors are fresh and owned here.
    Ok(unsafe { (File::from_raw_fd(fds[0]), File::from_raw_fd(fds[1])) })
}

/// Runs until stopped.
pub fn run(ctx: &Context, rate: &Knob) -> std::io::Result<()> {
    let (mut to_partner_r, mut to_partner_w) = pipe()?;
    let (mut back_r, mut back_w) = pipe()?;
    let cpu = ctx.cpu;
    // The partner inherits nothing from a nice set later: copy ours.
    // SAFETY: getpriority on this thread; errno is not consulted.
    let nice = unsafe {
        libc::getpriority(
            libc::PRIO_PROCESS,
            nix::unistd::gettid().as_raw() as libc::id_t,
        )
    };
    let siblings = ctx.siblings.clone();
    let partner = std::thread::Builder::new()
        .name(format!("loadgen-ctxsw-{cpu}"))
        .spawn(move || {
            let _ = pin_to_cpu(cpu);
            siblings.register_self();
            // SAFETY: setpriority on this thread's id.
            unsafe {
                libc::setpriority(
                    libc::PRIO_PROCESS,
                    nix::unistd::gettid().as_raw() as libc::id_t,
                    nice,
                )
            };
            let mut b = [0u8; 1];
            while to_partner_r.read_exact(&mut b).is_ok() && b[0] != 0 {
                if back_w.write_all(&b).is_err() {
                    break;
                }
            }
        })?;
    let mut b = [1u8; 1];
    // Switches of the siblings that are not hand-overs, per second, over
    // the last window.
    let mut counted = SiblingTotal::default();
    let mut count = || counted.delta(&ctx.siblings.list(), -1, |s| thread_switches(s.tid));
    count();
    let mut window_start = hwqos_core::time::monotonic_ns();
    let mut work_at_start = ctx.done.total();
    let mut others_rate = 0.0;
    paced(
        &ctx.stop,
        || {
            let now = hwqos_core::time::monotonic_ns();
            let dt = now.saturating_sub(window_start);
            if dt >= 100_000_000 {
                let all = count();
                let work = ctx.done.total().saturating_sub(work_at_start);
                others_rate = all.saturating_sub(work) as f64 / (dt as f64 / 1e9);
                window_start = now;
                work_at_start = ctx.done.total();
            }
            (rate.get() - others_rate).max(0.0) / 2.0
        },
        |n| {
            for _ in 0..n {
                if to_partner_w.write_all(&[1]).is_err() || back_r.read_exact(&mut b).is_err() {
                    return;
                }
            }
            ctx.done.add(2 * n);
        },
    );
    let _ = to_partner_w.write_all(&[0]);
    drop(to_partner_w);
    let _ = partner.join();
    Ok(())
}
