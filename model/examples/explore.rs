//! `cargo run -p xce-model --example explore -- [fixed|today|...]`: a check with a summary.
fn main() {
    let which = std::env::args().nth(1).unwrap_or_else(|| "fixed".into());
    let mut o = xce_model::Options::fixed();
    for kv in std::env::args().skip(2) {
        let (k, v) = kv.split_once('=').expect("k=v");
        let v: u8 = v.parse().expect("number");
        match k {
            "term" => o.bounds.max_term = v,
            "log" => o.bounds.max_log = v,
            "writes" => o.bounds.max_writes = v,
            "crashes" => o.bounds.max_crashes = v,
            "wipes" => o.bounds.max_wipes = v,
            "dups" => o.bounds.max_dups = v,
            "appends" => o.bounds.max_appends = v,
            "handovers" => o.bounds.max_handovers = v,
            "partial" => o.bounds.partial_appends = v != 0,
            "slow1" => o.timings[0] = xce_model::SLOW,
            "spare" => o.spare = v != 0,
            "changes" => o.bounds.max_changes = v,
            "new" => {
                o.start = if v != 0 {
                    xce_model::Start::BrandNew
                } else {
                    xce_model::Start::Running
                }
            }
            "behind" => o.start = xce_model::Start::Behind,
            _ => panic!("{k}"),
        }
    }
    match which.as_str() {
        "fixed" => {}
        "c12_today" => o.c12 = xce_model::C12::Today,
        "c12_issue25" => o.c12 = xce_model::C12::Issue25,
        "rereads" => o.today_campaign_rereads = true,
        "resume" => o.today_resume_old_term = true,
        "own_window" => {
            o.today_own_window = true;
            o.timings[0] = xce_model::SLOW;
        }
        _ => panic!("{which}"),
    }
    let stop: Option<&'static str> = std::env::var("STOP")
        .ok()
        .map(|v| &*Box::leak(v.into_boxed_str()));
    let out = xce_model::run::check(o, stop);
    println!("{which}: {}", out.summary());
    let mut names: Vec<_> = out.discoveries.keys().collect();
    names.sort();
    for p in names.into_iter().filter(|p| !p.starts_with("a ")) {
        println!("--- {p}\n{}", out.explain(p).unwrap());
    }
}
