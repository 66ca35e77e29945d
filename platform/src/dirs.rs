//! Directories that hold the user's data: created readable by the owner only.

use std::fs;
use std::path::Path;

/// Creates `dir` and any missing parents with mode 0700 (on unix). A directory that already
/// exists is left as it is: it may be one the user chose and shares on purpose.
pub fn create_private_dir(dir: &Path) -> std::io::Result<()> {
    let mut b = fs::DirBuilder::new();
    b.recursive(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::DirBuilderExt;
        b.mode(0o700);
    }
    b.create(dir)
}

/// [`create_private_dir`], and `dir` itself made owner-only if it already existed: for a
/// directory of the app's own inside a data directory.
pub fn ensure_private_dir(dir: &Path) -> std::io::Result<()> {
    create_private_dir(dir)?;
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = fs::metadata(dir)?.permissions().mode();
        if mode & 0o077 != 0 {
            fs::set_permissions(dir, fs::Permissions::from_mode(mode & 0o700))?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[cfg(unix)]
    #[test]
    fn new_directories_are_owner_only_and_an_own_directory_is_tightened() {
        use std::os::unix::fs::PermissionsExt;
        let root = std::env::temp_dir().join(format!("kostant-dirs-{}", std::process::id()));
        let _ = fs::remove_dir_all(&root);
        let deep = root.join("a/b");
        create_private_dir(&deep).unwrap();
        let mode = |p: &Path| fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&deep), 0o700);
        assert_eq!(mode(&root.join("a")), 0o700);
        fs::set_permissions(&deep, fs::Permissions::from_mode(0o755)).unwrap();
        create_private_dir(&deep).unwrap();
        assert_eq!(mode(&deep), 0o755, "an existing directory is left alone");
        ensure_private_dir(&deep).unwrap();
        assert_eq!(mode(&deep), 0o700);
        fs::remove_dir_all(&root).unwrap();
    }
}
