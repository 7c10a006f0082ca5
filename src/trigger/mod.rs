//! See DESIGN.md §2. Not built yet.
