//! What `explain` reads of a folder or an archive as a user hands it over (issue 11, point 11):
//! the files inside archives, by their inner names; hidden files, binaries and epdoctor's own
//! documents skipped and named in the notes; a zip bomb bounded. Drives the real binary.

use std::io::Write;
use std::path::Path;

use crate::common;
use crate::common::{tgz, TEARDOWN};

fn explain_json(paths: &[&Path]) -> (i32, serde_json::Value, String) {
    let o = common::epdoctor()
        .args(["explain", "--format", "json"])
        .args(paths)
        .timeout(std::time::Duration::from_secs(120))
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&o.stderr).into_owned();
    let v = serde_json::from_slice(&o.stdout).unwrap_or(serde_json::Value::Null);
    (o.status.code().unwrap(), v, stderr)
}

#[test]
fn a_folder_with_an_archive_hidden_files_a_binary_and_a_report() {
    let d = tempfile::tempdir().unwrap();
    let root = d.path();
    std::fs::create_dir_all(root.join(".venv/lib")).unwrap();
    std::fs::write(root.join(".venv/lib/nccl.log"), TEARDOWN).unwrap();
    std::fs::write(root.join("libnccl.so.2"), b"\x7fELF\x02\x01\x01\0 NCCL WARN %s\n").unwrap();
    std::fs::write(root.join("report.md"), format!("# epdoctor report\n\n{TEARDOWN}")).unwrap();
    std::fs::write(root.join("job.tgz"), tgz(&[("job/attempt_0/0/stderr.log", TEARDOWN.as_bytes())])).unwrap();
    let (code, v, err) = explain_json(&[root]);
    assert_eq!(code, 0, "{err}");
    let sources: Vec<&str> = v["inputs"].as_array().unwrap().iter().map(|i| i["source"].as_str().unwrap()).collect();
    assert_eq!(sources, [format!("{}!job/attempt_0/0/stderr.log", root.join("job.tgz").display())]);
    assert_eq!(v["verdict"], "benign");
    let notes: Vec<&str> = v["notes"].as_array().unwrap().iter().map(|n| n.as_str().unwrap()).collect();
    let has = |s: &str| notes.iter().any(|n| n.contains(s));
    assert!(has(".venv") && has("libnccl.so.2 (ELF") && has("report.md (an epdoctor report)"), "{notes:?}");
}

#[test]
fn a_zip_bomb_stops_with_a_note() {
    // One member of 64 MiB of zeros (deflates to about 64 KiB) whose headers declare 100 bytes.
    let d = tempfile::tempdir().unwrap();
    let mut w = zip::ZipWriter::new(std::io::Cursor::new(Vec::new()));
    let opts = zip::write::SimpleFileOptions::default().compression_method(zip::CompressionMethod::Deflated);
    w.start_file("rank0.log", opts).unwrap();
    w.write_all(TEARDOWN.as_bytes()).unwrap();
    w.write_all(&vec![0u8; 64 << 20]).unwrap();
    let mut z = w.finish().unwrap().into_inner();
    for (sig, off) in [(b"PK\x03\x04", 22), (b"PK\x01\x02", 24)] {
        let at = z.windows(4).position(|x| x == sig).unwrap() + off;
        z[at..at + 4].copy_from_slice(&100u32.to_le_bytes());
    }
    let p = d.path().join("bomb.zip");
    std::fs::write(&p, &z).unwrap();
    let (code, v, err) = explain_json(&[&p]);
    assert!([0, 1, 3].contains(&code), "{code} {err}");
    let notes = v["notes"].to_string();
    assert!(notes.contains("bomb.zip!rank0.log") && notes.contains("unpacks to more than 100 bytes"), "{notes}");
    assert!(v["inputs"][0]["bytes"].as_u64().unwrap() <= 100);
}

#[test]
fn a_pipe_is_read_from_its_first_byte() {
    // What `explain <(zcat log.gz)` hands over: a FIFO. Looking at its start must not eat it.
    let d = tempfile::tempdir().unwrap();
    let fifo = d.path().join("fifo");
    nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
    let writer = {
        let fifo = fifo.clone();
        std::thread::spawn(move || std::fs::write(fifo, TEARDOWN.repeat(3)).unwrap())
    };
    let (code, v, err) = explain_json(&[&fifo]);
    writer.join().unwrap();
    assert_eq!(code, 0, "{err}");
    assert_eq!(v["inputs"][0]["lines"], 3);
    assert_eq!(v["verdict"], "benign");
}

/// A missing path among several (issue 28, point 4): the others are explained, the missing one is
/// named on stderr and in `unread`, and the status is 2 at the end, as ripgrep does.
#[test]
fn a_missing_path_is_named_and_the_rest_explained() {
    let d = tempfile::tempdir().unwrap();
    let (log, empty_dir, missing) = (d.path().join("rank0.log"), d.path().join("no-logs"), d.path().join("gone.log"));
    std::fs::write(&log, TEARDOWN).unwrap();
    std::fs::create_dir(&empty_dir).unwrap();
    let (code, v, err) = explain_json(&[&missing, &log, &empty_dir]);
    assert_eq!(code, 2, "{err}");
    assert_eq!(v["inputs"].as_array().map(Vec::len), Some(1), "rank0.log was still explained: {v}");
    assert!(v["findings"].as_array().is_some_and(|f| !f.is_empty()), "{v}");
    assert_ne!(v["verdict"], "benign", "a verdict past an unread path is never benign: {v}");
    let unread = v["unread"].to_string();
    assert!(unread.contains("gone.log") && unread.contains("no-logs"), "{unread}");
    assert!(err.contains("gone.log") && err.contains("no-logs holds no log files"), "{err}");
    // Only missing paths: an error before any output, naming each.
    let (code, v, err) = explain_json(&[&missing, &empty_dir]);
    assert_eq!((code, v), (2, serde_json::Value::Null), "{err}");
    assert!(err.contains("gone.log") && err.contains("no-logs"), "{err}");
}
