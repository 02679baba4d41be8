//! Keeping tool paths inside the project root.

use std::path::{Component, Path, PathBuf};

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PathError {
    #[error("{requested:?} contains '..'; give a path relative to the project root without '..'")]
    ParentComponent { requested: String },
    #[error("{requested:?} is outside the project root; give a path relative to the project root")]
    OutsideRoot { requested: String },
    #[error("{requested:?} is a symlink that leads outside the project root; it cannot be used")]
    SymlinkEscape { requested: String },
    #[error("{requested:?} does not exist in the project; use list_files to see what does")]
    NotFound { requested: String },
    #[error("{requested:?}: {message}")]
    Unreadable { requested: String, message: String },
    #[error("{requested:?} is inside .git; the repository's internals are never written")]
    GitDirectory { requested: String },
    #[error("{requested:?} is a directory; give the path of a file")]
    Directory { requested: String },
}

/// The canonical project root. All tool paths resolve against it and must stay inside it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProjectRoot {
    canonical: PathBuf,
}

impl ProjectRoot {
    pub fn new(path: &Path) -> std::io::Result<ProjectRoot> {
        let canonical = path.canonicalize()?;
        if !canonical.is_dir() {
            return Err(std::io::Error::new(
                std::io::ErrorKind::NotADirectory,
                format!("{} is not a directory", canonical.display()),
            ));
        }
        Ok(ProjectRoot { canonical })
    }

    pub fn path(&self) -> &Path {
        &self.canonical
    }

    /// Resolves `requested` (relative to the root, or absolute inside it) to an existing path
    /// inside the root. `..` is refused outright rather than normalised, and symlinks are
    /// followed and must still land inside the root.
    pub fn resolve_existing(&self, requested: &str) -> Result<PathBuf, PathError> {
        let requested_path = Path::new(requested.trim());
        let owned = || requested.to_owned();
        if requested_path
            .components()
            .any(|component| component == Component::ParentDir)
        {
            return Err(PathError::ParentComponent { requested: owned() });
        }
        let joined = if requested_path.is_absolute() {
            if !requested_path.starts_with(&self.canonical) {
                return Err(PathError::OutsideRoot { requested: owned() });
            }
            requested_path.to_path_buf()
        } else {
            self.canonical.join(requested_path)
        };
        let resolved = match joined.canonicalize() {
            Ok(resolved) => resolved,
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => {
                // A dangling symlink also reports NotFound; say which one it is.
                return Err(if joined.symlink_metadata().is_ok() {
                    PathError::SymlinkEscape { requested: owned() }
                } else {
                    PathError::NotFound { requested: owned() }
                });
            }
            Err(err) => {
                return Err(PathError::Unreadable {
                    requested: owned(),
                    message: err.to_string(),
                });
            }
        };
        if !resolved.starts_with(&self.canonical) {
            return Err(PathError::SymlinkEscape { requested: owned() });
        }
        Ok(resolved)
    }

    /// Resolves `requested` to a file path inside the root that may be written: it may not
    /// exist yet, but its deepest existing ancestor must lie inside the root once symlinks are
    /// followed, it may not be a directory, and nothing under `.git` qualifies.
    pub fn resolve_for_write(&self, requested: &str) -> Result<PathBuf, PathError> {
        if requested.trim().is_empty() {
            return Err(PathError::Directory {
                requested: requested.to_owned(),
            });
        }
        self.resolve_write(Path::new(requested.trim()), &|| requested.to_owned())
    }

    /// As `resolve_for_write`, for a path whose name need not be Unicode (one git or a
    /// command wrote), relative to the root or absolute.
    pub fn resolve_path_for_write(&self, requested: &Path) -> Result<PathBuf, PathError> {
        if requested.as_os_str().is_empty() {
            return Err(PathError::Directory {
                requested: String::new(),
            });
        }
        self.resolve_write(requested, &|| requested.to_string_lossy().into_owned())
    }

    fn resolve_write(
        &self,
        requested_path: &Path,
        owned: &dyn Fn() -> String,
    ) -> Result<PathBuf, PathError> {
        if requested_path
            .components()
            .any(|component| component == Component::ParentDir)
        {
            return Err(PathError::ParentComponent { requested: owned() });
        }
        let relative = if requested_path.is_absolute() {
            requested_path
                .strip_prefix(&self.canonical)
                .map_err(|_| PathError::OutsideRoot { requested: owned() })?
                .to_path_buf()
        } else {
            requested_path.to_path_buf()
        };
        if relative
            .components()
            .any(|component| component.as_os_str() == ".git")
        {
            return Err(PathError::GitDirectory { requested: owned() });
        }
        let joined = self.canonical.join(&relative);
        // Follow whatever exists of the path, so a symlinked directory cannot lead out.
        let mut existing = joined.as_path();
        let mut missing = Vec::new();
        while existing.symlink_metadata().is_err() {
            let Some(name) = existing.file_name() else {
                return Err(PathError::OutsideRoot { requested: owned() });
            };
            missing.push(name.to_owned());
            existing = existing.parent().unwrap_or(&self.canonical);
        }
        let resolved_existing = existing.canonicalize().map_err(|err| {
            if existing.symlink_metadata().is_ok() && err.kind() == std::io::ErrorKind::NotFound {
                PathError::SymlinkEscape { requested: owned() }
            } else {
                PathError::Unreadable {
                    requested: owned(),
                    message: err.to_string(),
                }
            }
        })?;
        if !resolved_existing.starts_with(&self.canonical) {
            return Err(PathError::SymlinkEscape { requested: owned() });
        }
        let resolved = missing
            .iter()
            .rev()
            .fold(resolved_existing, |path, name| path.join(name));
        let inside = resolved.strip_prefix(&self.canonical).unwrap_or(&resolved);
        if inside
            .components()
            .any(|component| component.as_os_str() == ".git")
        {
            return Err(PathError::GitDirectory { requested: owned() });
        }
        if resolved.is_dir() {
            return Err(PathError::Directory { requested: owned() });
        }
        Ok(resolved)
    }

    /// `path` relative to the root, with `/` separators, for showing to the model.
    pub fn relative_display(&self, path: &Path) -> String {
        let relative = path.strip_prefix(&self.canonical).unwrap_or(path);
        let text = relative.to_string_lossy().replace('\\', "/");
        if text.is_empty() {
            ".".to_owned()
        } else {
            text
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Fixture {
        _outside: tempfile::TempDir,
        _project: tempfile::TempDir,
        root: ProjectRoot,
        outside_file: PathBuf,
    }

    fn fixture() -> Fixture {
        let outside = tempfile::tempdir().expect("tempdir");
        let project = tempfile::tempdir().expect("tempdir");
        let outside_file = outside.path().join("secret.txt");
        std::fs::write(&outside_file, "secret").expect("write");
        std::fs::create_dir_all(project.path().join("src")).expect("mkdir");
        std::fs::write(project.path().join("src/main.rs"), "fn main() {}").expect("write");
        #[cfg(unix)]
        {
            std::os::unix::fs::symlink(&outside_file, project.path().join("leak")).expect("link");
            std::os::unix::fs::symlink(outside.path(), project.path().join("leakdir"))
                .expect("link");
            std::os::unix::fs::symlink("src/main.rs", project.path().join("inside_link"))
                .expect("link");
            std::os::unix::fs::symlink(
                outside.path().join("gone"),
                project.path().join("dangling"),
            )
            .expect("link");
        }
        let root = ProjectRoot::new(project.path()).expect("root");
        Fixture {
            _outside: outside,
            _project: project,
            root,
            outside_file,
        }
    }

    #[test]
    fn relative_and_absolute_paths_inside_the_root_resolve() {
        let fx = fixture();
        let expected = fx.root.path().join("src/main.rs");
        assert_eq!(
            fx.root.resolve_existing("src/main.rs"),
            Ok(expected.clone())
        );
        assert_eq!(
            fx.root.resolve_existing("./src/main.rs"),
            Ok(expected.clone())
        );
        let absolute = expected.to_string_lossy().into_owned();
        assert_eq!(fx.root.resolve_existing(&absolute), Ok(expected));
        assert_eq!(
            fx.root.resolve_existing(""),
            Ok(fx.root.path().to_path_buf())
        );
    }

    #[test]
    fn parent_components_are_refused_even_when_they_stay_inside() {
        let fx = fixture();
        for requested in ["../secret.txt", "src/../src/main.rs", "src/../../x"] {
            assert_eq!(
                fx.root.resolve_existing(requested),
                Err(PathError::ParentComponent {
                    requested: requested.to_owned()
                })
            );
        }
    }

    #[test]
    fn absolute_paths_outside_the_root_are_refused() {
        let fx = fixture();
        let outside = fx.outside_file.to_string_lossy().into_owned();
        assert_eq!(
            fx.root.resolve_existing(&outside),
            Err(PathError::OutsideRoot {
                requested: outside.clone()
            })
        );
        assert_eq!(
            fx.root.resolve_existing("/etc/passwd"),
            Err(PathError::OutsideRoot {
                requested: "/etc/passwd".to_owned()
            })
        );
    }

    #[cfg(unix)]
    #[test]
    fn symlinks_leading_out_are_refused_and_inside_links_allowed() {
        let fx = fixture();
        for requested in ["leak", "leakdir/secret.txt", "dangling"] {
            assert_eq!(
                fx.root.resolve_existing(requested),
                Err(PathError::SymlinkEscape {
                    requested: requested.to_owned()
                }),
                "{requested}"
            );
        }
        assert_eq!(
            fx.root.resolve_existing("inside_link"),
            Ok(fx.root.path().join("src/main.rs"))
        );
    }

    #[test]
    fn write_paths_may_be_new_but_stay_inside_and_out_of_git() {
        let fx = fixture();
        let root = fx.root.path().to_path_buf();
        assert_eq!(
            fx.root.resolve_for_write("src/new/mod.rs"),
            Ok(root.join("src/new/mod.rs"))
        );
        assert_eq!(
            fx.root.resolve_for_write("src/main.rs"),
            Ok(root.join("src/main.rs"))
        );
        for (requested, expected) in [
            ("../x.rs", "ParentComponent"),
            ("/etc/passwd", "OutsideRoot"),
            (".git/config", "GitDirectory"),
            ("sub/.git/hooks/pre-commit", "GitDirectory"),
            ("src", "Directory"),
            ("", "Directory"),
        ] {
            let err = fx.root.resolve_for_write(requested).expect_err(requested);
            assert!(
                format!("{err:?}").starts_with(expected),
                "{requested}: {err:?}"
            );
        }
    }

    #[cfg(unix)]
    #[test]
    fn writes_through_symlinks_that_lead_out_are_refused() {
        let fx = fixture();
        for requested in [
            "leak",
            "leakdir/new.txt",
            "leakdir/deeper/new.txt",
            "dangling",
        ] {
            let err = fx.root.resolve_for_write(requested).expect_err(requested);
            assert!(
                matches!(err, PathError::SymlinkEscape { .. }),
                "{requested}: {err:?}"
            );
        }
    }

    #[test]
    fn missing_paths_say_how_to_find_real_ones() {
        let fx = fixture();
        let err = fx.root.resolve_existing("nope.rs").expect_err("missing");
        assert!(err.to_string().contains("list_files"), "{err}");
    }
}
