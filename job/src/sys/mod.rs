//! Every `unsafe` of sode-job: the PMIx client library, loaded at run time,
//! the PMI socket a launcher leaves open, the state of the program's MPI,
//! and the hook run at exit.

pub(crate) mod at_exit;
pub(crate) mod inherited;
pub(crate) mod mpi_state;
pub(crate) mod pmix;
