"""Files nsys-cc writes: written whole, under `-o DIR` through one writer, reports replaced as a whole.

- `atomic`: `write_text` / `write_bytes` — a file replaced by one rename, never seen half written;
- `signals`: `signals_deferred` — Ctrl-C (SIGINT, SIGTERM, SIGHUP) held until a few renames that belong together end;
- `folder`: `Folder` — the one writer of a directory (`-o DIR`): no write, folder, removal or rename follows a link
  out of it; its lock (one writer at a time); `check_out_dir`;
- `users`: `my_uid` — the user whose files are trusted (the export cache's entries, the `-o` lock);
- `publishing`: `publish` / `withdraw` — a report directory's files replaced as a whole (generations switched by one
  rename), touching only files it can prove it wrote.

Every module of the package that writes under `-o` goes through these (tests/reliability/test_writes.py walks the
package for writes around them). They import nothing of the package but `errors` and `inputs`.
"""
