# The image factory: an Amazon Machine Image with Ollama, a model and the
# tidegpu agent baked in, so that an instance serves seconds after boot
# (spec.bootstrap with template ollama then only writes the agent's notice
# URL and token and starts the units; the pull finds the model on disk).
#
#   packer init deploy/packer
#   packer build -var region=us-east-1 -var model=qwen2:0.5b \
#     -var tidegpu_binary=./bin/tidegpu deploy/packer/tidegpu-ollama.pkr.hcl
#
# Then set the pool's spec.imageId to the AMI it prints.

packer {
  required_plugins {
    amazon = {
      source  = "github.com/hashicorp/amazon"
      version = ">= 1.3.0"
    }
  }
}

variable "region" {
  type        = string
  description = "AWS region to build the AMI in."
}

variable "instance_type" {
  type        = string
  default     = "g5.xlarge"
  description = "Builder instance type: a GPU type, so the NVIDIA driver is checked on the build."
}

variable "model" {
  type        = string
  default     = "qwen2:0.5b"
  description = "Ollama model pulled into the image."
}

variable "tidegpu_binary" {
  type        = string
  default     = "bin/tidegpu"
  description = "Path of the linux/amd64 tidegpu binary (make build) installed as /usr/local/bin/tidegpu."
}

variable "ami_name_prefix" {
  type    = string
  default = "tidegpu-ollama"
}

locals {
  model_slug = regex_replace(var.model, "[^A-Za-z0-9-]", "-")
  timestamp  = formatdate("YYYYMMDD-hhmm", timestamp())
}

# The AWS Deep Learning Base GPU AMI (Ubuntu 22.04) carries the NVIDIA driver
# and CUDA; Ollama uses them as they are.
source "amazon-ebs" "ollama" {
  region        = var.region
  instance_type = var.instance_type
  ssh_username  = "ubuntu"
  ami_name      = "${var.ami_name_prefix}-${local.model_slug}-${local.timestamp}"

  source_ami_filter {
    filters = {
      name                = "Deep Learning Base OSS Nvidia Driver GPU AMI (Ubuntu 22.04)*"
      virtualization-type = "hvm"
      root-device-type    = "ebs"
    }
    owners      = ["amazon"]
    most_recent = true
  }

  launch_block_device_mappings {
    device_name           = "/dev/sda1"
    volume_size           = 100
    volume_type           = "gp3"
    delete_on_termination = true
  }

  # IMDSv2 only, as the agent uses it.
  metadata_options {
    http_endpoint               = "enabled"
    http_tokens                 = "required"
    http_put_response_hop_limit = 1
  }

  tags = {
    "tidegpu.eja.dev/image" = "ollama"
    "tidegpu.eja.dev/model" = var.model
  }
}

build {
  sources = ["source.amazon-ebs.ollama"]

  provisioner "file" {
    source      = var.tidegpu_binary
    destination = "/tmp/tidegpu"
  }

  provisioner "shell" {
    environment_vars = ["MODEL=${var.model}"]
    inline = [
      "set -eu",
      "sudo install -m 0755 /tmp/tidegpu /usr/local/bin/tidegpu",
      "/usr/local/bin/tidegpu --help >/dev/null",
      "curl -fsSL https://ollama.com/install.sh | sh",
      "sudo systemctl enable ollama.service",
      "sudo systemctl start ollama.service",
      "until curl -fsS http://127.0.0.1:11434/api/version >/dev/null; do sleep 1; done",
      "ollama pull \"$MODEL\"",
      # Leave no per-instance state in the image: cloud-init runs afresh.
      "sudo systemctl stop ollama.service",
      "sudo cloud-init clean --logs",
    ]
  }
}
