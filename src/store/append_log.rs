//! Append-only files of JSON lines: a write adds whole lines and is durable when it returns;
//! a write torn by a crash leaves at most one incomplete last line, which reading drops and
//! the next append cuts off first, so it can never glue onto a new line.

use std::fs::{File, OpenOptions};
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};

/// One append-only file of lines.
#[derive(Clone, Debug)]
pub struct AppendLog {
    path: PathBuf,
}

/// What a log holds: its complete lines, and whether an incomplete one followed them.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct LogLines {
    pub lines: Vec<Vec<u8>>,
    pub torn_tail: bool,
}

impl AppendLog {
    pub fn at(path: impl Into<PathBuf>) -> AppendLog {
        AppendLog { path: path.into() }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn exists(&self) -> bool {
        self.path.exists()
    }

    /// The complete lines (without their newline). A missing file has none.
    pub fn read(&self) -> io::Result<LogLines> {
        let mut bytes = Vec::new();
        match File::open(&self.path) {
            Ok(mut file) => file.read_to_end(&mut bytes)?,
            Err(err) if err.kind() == io::ErrorKind::NotFound => return Ok(LogLines::default()),
            Err(err) => return Err(with_path(err, &self.path)),
        };
        let complete = complete_len(&bytes);
        let lines = bytes[..complete]
            .split(|byte| *byte == b'\n')
            .filter(|line| !line.is_empty())
            .map(<[u8]>::to_vec)
            .collect();
        Ok(LogLines {
            lines,
            torn_tail: complete < bytes.len(),
        })
    }

    /// Cuts the log after its first `keep` lines (an unfinished batch a crash left behind).
    pub fn keep_lines(&self, keep: usize) -> io::Result<()> {
        let bytes = std::fs::read(&self.path).map_err(|err| with_path(err, &self.path))?;
        let length = if keep == 0 {
            0
        } else {
            match bytes
                .iter()
                .enumerate()
                .filter(|(_, byte)| **byte == b'\n')
                .nth(keep - 1)
            {
                Some((index, _)) => index + 1,
                None => return Ok(()),
            }
        };
        let file = OpenOptions::new()
            .write(true)
            .open(&self.path)
            .map_err(|err| with_path(err, &self.path))?;
        file.set_len(length as u64)
            .and_then(|()| file.sync_data())
            .map_err(|err| with_path(err, &self.path))
    }

    /// Appends `lines` (each without a newline) in one write and syncs the data before it
    /// returns. Creates the file (and its directory) if needed.
    pub fn append(&self, lines: &[Vec<u8>]) -> io::Result<()> {
        self.write_lines(lines, true)
    }

    /// Like `append`, without waiting for the disk: the lines are on disk once a later
    /// `append` returns (syncing a file's data syncs all of it), and a crash before that may
    /// lose or tear them, which reading drops. For lines nothing depends on until the next
    /// synced append.
    pub fn append_unsynced(&self, lines: &[Vec<u8>]) -> io::Result<()> {
        self.write_lines(lines, false)
    }

    fn write_lines(&self, lines: &[Vec<u8>], sync: bool) -> io::Result<()> {
        if lines.is_empty() {
            return Ok(());
        }
        if let Some(dir) = self.path.parent() {
            std::fs::create_dir_all(dir).map_err(|err| with_path(err, dir))?;
        }
        let mut file = OpenOptions::new()
            .read(true)
            .append(true)
            .create(true)
            .open(&self.path)
            .map_err(|err| with_path(err, &self.path))?;
        cut_torn_tail(&mut file).map_err(|err| with_path(err, &self.path))?;
        let mut batch = Vec::with_capacity(lines.iter().map(|line| line.len() + 1).sum());
        for line in lines {
            debug_assert!(!line.contains(&b'\n'), "a log line holds no newline");
            batch.extend_from_slice(line);
            batch.push(b'\n');
        }
        let (head, tail) = batch.split_at(batch.len() / 2);
        file.write_all(head)
            .map_err(|err| with_path(err, &self.path))?;
        if let Some(name) = self.path.file_name().and_then(|name| name.to_str()) {
            // Crash tests kill the host here, leaving a torn batch behind.
            crate::test_hooks::pause_point(&format!("append:{name}"));
        }
        file.write_all(tail)
            .and_then(|()| if sync { file.sync_data() } else { Ok(()) })
            .map_err(|err| with_path(err, &self.path))
    }
}

/// Bytes up to and including the last newline.
fn complete_len(bytes: &[u8]) -> usize {
    bytes
        .iter()
        .rposition(|byte| *byte == b'\n')
        .map_or(0, |last| last + 1)
}

/// Removes an incomplete last line left by a crash. Reads only the file's tail.
fn cut_torn_tail(file: &mut File) -> io::Result<()> {
    use std::io::{Seek, SeekFrom};
    let len = file.metadata()?.len();
    if len == 0 {
        return Ok(());
    }
    let mut last = [0u8; 1];
    file.seek(SeekFrom::Start(len - 1))?;
    file.read_exact(&mut last)?;
    if last[0] == b'\n' {
        return Ok(());
    }
    // Walk back in blocks to the last newline; a torn line is at most one turn's entries.
    let mut end = len;
    let mut block = vec![0u8; 64 * 1024];
    let keep = loop {
        let start = end.saturating_sub(block.len() as u64);
        let size = usize::try_from(end - start).unwrap_or(block.len());
        file.seek(SeekFrom::Start(start))?;
        file.read_exact(&mut block[..size])?;
        if let Some(at) = block[..size].iter().rposition(|byte| *byte == b'\n') {
            break start + at as u64 + 1;
        }
        if start == 0 {
            break 0;
        }
        end = start;
    };
    file.set_len(keep)?;
    file.sync_data()
}

fn with_path(err: io::Error, path: &Path) -> io::Error {
    io::Error::new(err.kind(), format!("{}: {err}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn log() -> (tempfile::TempDir, AppendLog) {
        let dir = tempfile::tempdir().expect("tempdir");
        let log = AppendLog::at(dir.path().join("sub").join("log.jsonl"));
        (dir, log)
    }

    #[test]
    fn appends_whole_lines_and_reads_them_back() {
        let (_dir, log) = log();
        assert_eq!(log.read().expect("read"), LogLines::default());
        log.append(&[b"one".to_vec(), b"two".to_vec()])
            .expect("append");
        log.append(&[b"three".to_vec()]).expect("append");
        let read = log.read().expect("read");
        assert_eq!(
            read.lines,
            vec![b"one".to_vec(), b"two".to_vec(), b"three".to_vec()]
        );
        assert!(!read.torn_tail);
    }

    #[test]
    fn a_torn_last_line_is_dropped_and_cut_before_the_next_append() {
        let (_dir, log) = log();
        log.append(&[b"whole".to_vec()]).expect("append");
        let mut file = OpenOptions::new()
            .append(true)
            .open(log.path())
            .expect("open");
        file.write_all(b"{\"half\":").expect("tear");
        drop(file);
        let read = log.read().expect("read");
        assert_eq!(read.lines, vec![b"whole".to_vec()]);
        assert!(read.torn_tail);
        log.append(&[b"next".to_vec()]).expect("append");
        assert_eq!(
            std::fs::read(log.path()).expect("bytes"),
            b"whole\nnext\n".to_vec()
        );
    }

    #[test]
    fn unsynced_lines_are_read_like_synced_ones_and_a_later_append_follows_them() {
        let (_dir, log) = log();
        log.append_unsynced(&[b"start".to_vec(), b"state".to_vec()])
            .expect("append");
        assert_eq!(
            log.read().expect("read").lines,
            vec![b"start".to_vec(), b"state".to_vec()]
        );
        log.append(&[b"turn".to_vec()]).expect("append");
        assert_eq!(
            std::fs::read(log.path()).expect("bytes"),
            b"start\nstate\nturn\n".to_vec()
        );
    }

    #[test]
    fn keeping_lines_cuts_what_follows() {
        let (_dir, log) = log();
        log.append(&[b"a".to_vec(), b"b".to_vec(), b"c".to_vec()])
            .expect("append");
        log.keep_lines(2).expect("keep");
        assert_eq!(
            std::fs::read(log.path()).expect("bytes"),
            b"a\nb\n".to_vec()
        );
        log.keep_lines(0).expect("keep none");
        assert_eq!(std::fs::read(log.path()).expect("bytes"), Vec::<u8>::new());
    }

    #[test]
    fn a_file_that_is_all_torn_line_is_emptied() {
        let (_dir, log) = log();
        std::fs::create_dir_all(log.path().parent().expect("dir")).expect("dir");
        std::fs::write(log.path(), vec![b'x'; 200_000]).expect("write");
        assert_eq!(log.read().expect("read").lines.len(), 0);
        log.append(&[b"first".to_vec()]).expect("append");
        assert_eq!(
            std::fs::read(log.path()).expect("bytes"),
            b"first\n".to_vec()
        );
    }
}
