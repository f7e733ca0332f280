use hwqos_compress::wire::parse_all;
use hwqos_compress::*;
use std::sync::Arc;
fn deliver(from: &mut Endpoint, to: &mut Endpoint, bytes: &[u8]) {
    let mut replies = Vec::new();
    for f in parse_all(bytes, to.limits()).unwrap() { to.decode(f, &mut replies).unwrap(); }
    let mut back = Vec::new();
    for f in parse_all(&replies, from.limits()).unwrap() { from.decode(f, &mut back).unwrap(); }
}
fn main() {
    let link: f64 = std::env::args().nth(1).unwrap().parse().unwrap();
    let cfg = StreamConfig { policy: "adaptive".parse().unwrap(), throttle: None, link_ns_per_byte: Some(link), round_messages: 100, sampling: Sampling::Inline, adaptive: hwqos_compress::policy::AdaptiveTuning { explore_share: f64::INFINITY, burst_share: f64::INFINITY, ..Default::default() }, ..Default::default() };
    let reg = Arc::new(Registry::standard());
    let mut a = Endpoint::new(cfg.clone(), reg.clone());
    let mut b = Endpoint::new(cfg, reg.clone());
    let (mut ha, mut hb) = (Vec::new(), Vec::new());
    a.write_hello(&mut ha); b.write_hello(&mut hb);
    a.accept_hello(parse_all(&hb, a.limits()).unwrap().remove(0)).unwrap();
    b.accept_hello(parse_all(&ha, b.limits()).unwrap().remove(0)).unwrap();
    let msg = vec![0u8; 600];
    for i in 0..1500 {
        let mut out = Vec::new();
        a.encode(&msg, &mut out).unwrap();
        a.run_deferred_sample();
        deliver(&mut a, &mut b, &out);
        if i % 50 == 0 || i < 30 {
            let st = a.stats();
            println!("{i} chosen {} samples {} sns {} credit {:.0} max {} burst {} backoff {} round {}", st.chosen, st.samples, st.sample_ns, st.sample_credit_ns, st.max_sample_ns, a.selector().in_burst(), a.selector().backoff(), st.round);
        }
    }
}
