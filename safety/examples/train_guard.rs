//! `kostant guard train` without the app around it: the same `train_head` with the same
//! defaults but no feature contexts (the features live in the app), for machines where
//! building the whole app is slow.
//! usage: train_guard MODEL.gguf DATA_DIR OUT.bin [FEATURES_CACHE_DIR]

use kostant_safety::train::{train_head, TrainOptions};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    if args.len() < 4 {
        return Err("usage: train_guard MODEL.gguf DATA_DIR OUT.bin [FEATURES_CACHE_DIR]".into());
    }
    let model = kostant_engine::Model::load(std::path::Path::new(&args[1]))?;
    let mut opts = TrainOptions::new(args[2].clone().into());
    opts.cache = args.get(4).map(Into::into);
    let t = std::time::Instant::now();
    let trained = train_head(model, &opts, &mut |stage, i, n| {
        if i == n || i % 500 == 0 {
            eprintln!("{stage}: {n} texts read");
        }
    })?;
    trained.head.save(std::path::Path::new(&args[3]))?;
    eprintln!(
        "{:.0} s: threshold {:.3}; dev recall {:.3}, dev false positives {:.3}; train recall {:.3}, train false positives {:.3}",
        t.elapsed().as_secs_f64(),
        trained.head.info.threshold,
        trained.dev.recall,
        trained.dev.false_positive_rate,
        trained.train.recall,
        trained.train.false_positive_rate
    );
    if let (Some(t), Some(r)) = (trained.head.info.output_threshold, &trained.dev_replies) {
        eprintln!(
            "reply threshold {t:.3}; dev replies stopped: {:.3} of unsafe, {:.3} of safe ({} unsafe, {} safe)",
            r.recall, r.false_positive_rate, r.n_unsafe, r.n_safe
        );
    }
    Ok(())
}
