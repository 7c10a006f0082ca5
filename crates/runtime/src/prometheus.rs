//! kube-apiserver's `/metrics`, read in either exposition it offers: the protobuf one
//! ([`proto`], asked for first: no text parsing on the hot path) and the text one ([`text`]).

pub mod proto;
pub mod text;
