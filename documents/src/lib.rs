//! A user's files turned into cited chunks, and those chunks ranked for a query.
//!
//! [`ingest`] reads text, Markdown, HTML and PDF files into [`Section`]s that know their page
//! and heading; [`chunk()`] cuts those into [`Chunk`]s sized for the embedder; [`rank`] finds the
//! chunks for a query by BM25, by vector similarity (the vectors come from elsewhere) and by
//! fusing the two. No crate of ours is a dependency: this one knows nothing of models.
#![forbid(unsafe_code)]

pub mod chunk;
pub mod cite;
mod error;
pub mod ingest;
pub mod rank;

pub use chunk::{chunk, Chunk, ChunkOptions};
pub use cite::{indexed_text, place_label};
pub use error::IngestError;
pub use ingest::{parse_document, read_document, Document, Format, Place, Section, SectionKind};
pub use rank::{
    hybrid_search, Bm25Index, Corpus, CorpusEntry, Hit, Relevance, MIN_RELEVANT_COSINE,
};
